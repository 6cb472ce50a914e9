// The Ascend NPU backend, through torch_npu. Built only with WITH_NPU (setup.py defines it when
// torch_npu is importable at install time); tests/test_devices.py compiles it against the
// headers of the torch_npu wheel that matches the pinned torch. It has not run on an NPU.
//
// MindSpore's buffers become tensors through at_npu::native::from_blob (boundary/ms_ext.cpp).
// ATen runs on torch_npu's current stream, ordered against MindSpore's stream by two events,
// with no device synchronization. torch_npu 2.13 can adopt an external aclrtStream
// (c10_npu::getStreamFromExternal), but its task queue refuses to enqueue on one when per-stream
// queues are on, and NPUStream::stream() does not empty the queue for one, so ATen's work could
// reach MindSpore's stream after MindSpore's next kernel.
#include "device/device.h"

#ifdef WITH_NPU

#include <acl/acl.h>
#include <torch_npu/csrc/core/npu/NPUGuard.h>
#include <torch_npu/csrc/core/npu/NPUStream.h>

#include <array>
#include <stdexcept>
#include <unordered_map>

namespace ms_aten {
namespace {

void check_acl(aclError status, const char* what) {
  if (status != ACL_SUCCESS) {
    throw std::runtime_error(c10::str(what, " failed with ACL error ", status));
  }
}

// This thread's two ordering events on `device`, made on first use and kept: ACL forbids
// destroying an event before the stream waits on it have run, and an event made by
// aclrtCreateEventExWithFlag may be recorded again.
const std::array<aclrtEvent, 2>& ordering_events(c10::DeviceIndex device) {
  thread_local std::unordered_map<c10::DeviceIndex, std::array<aclrtEvent, 2>> events;
  auto found = events.find(device);
  if (found != events.end()) return found->second;
  std::array<aclrtEvent, 2> fresh{};
  for (aclrtEvent& event : fresh) {
    check_acl(aclrtCreateEventExWithFlag(&event, ACL_EVENT_SYNC), "aclrtCreateEventExWithFlag");
  }
  return events.emplace(device, fresh).first->second;
}

// `waiter` waits (on the device) for everything queued on `signaller` so far.
void order_after(aclrtStream waiter, aclrtStream signaller, aclrtEvent event) {
  check_acl(aclrtRecordEvent(event, signaller), "aclrtRecordEvent");
  check_acl(aclrtStreamWaitEvent(waiter, event), "aclrtStreamWaitEvent");
}

}  // namespace

bool built_with_npu() { return true; }

void run_on_npu(void* stream, int /*nparam*/, void** /*params*/,
                const std::function<void(c10::Device)>& body) {
  int32_t device_index = 0;
  check_acl(aclrtGetDevice(&device_index), "aclrtGetDevice");
  const c10::Device device(c10::DeviceType::PrivateUse1,
                           static_cast<c10::DeviceIndex>(device_index));
  c10_npu::NPUGuard device_guard(device);
  const auto& events = ordering_events(device.index());
  auto ms_stream = static_cast<aclrtStream>(stream);
  const c10_npu::NPUStream aten_stream = c10_npu::getCurrentNPUStream(device.index());
  // stream() first empties torch_npu's host task queue (TASK_QUEUE_ENABLE), so each raw ACL
  // call below lands after every ATen launch queued before it: before the body, and, the
  // second time, after the body's own launches.
  order_after(aten_stream.stream(), ms_stream, events[0]);
  body(device);
  order_after(ms_stream, aten_stream.stream(), events[1]);
}

}  // namespace ms_aten

#else

#include <stdexcept>

namespace ms_aten {

bool built_with_npu() { return false; }

void run_on_npu(void*, int, void**, const std::function<void(c10::Device)>&) {
  throw std::runtime_error(
      "ms_aten was built without Ascend NPU support (torch_npu was not importable when it was "
      "installed); run the op on CPU with op.set_device('CPU'), or reinstall ms_aten with "
      "torch_npu");
}

}  // namespace ms_aten

#endif
