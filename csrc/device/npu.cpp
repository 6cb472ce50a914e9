// The Ascend NPU backend, through torch_npu. Built only with WITH_NPU (setup.py defines it when
// torch_npu is importable at install time). It has not run on hardware here: no NPU, and no
// torch_npu wheel for this torch, were available while it was written.
//
// torch_npu provides at_npu::native::from_blob (torch_npu/csrc/aten/common/from_blob.h, in
// torch_npu 2.1 and later) to wrap external NPU memory, but, unlike c10::cuda, no public call
// that adopts an external aclrtStream. So ATen runs on torch_npu's current stream, ordered
// against MindSpore's stream with two events: no device synchronization.
#include "device/device.h"

#ifdef WITH_NPU

#include <acl/acl.h>
#include <torch_npu/csrc/core/npu/NPUStream.h>

#include <stdexcept>

namespace ms_aten {
namespace {

void check_acl(aclError status, const char* what) {
  if (status != ACL_SUCCESS) {
    throw std::runtime_error(c10::str(what, " failed with ACL error ", status));
  }
}

// `waiter` waits (on the device) for everything queued on `signaller` so far.
void order_after(aclrtStream waiter, aclrtStream signaller) {
  aclrtEvent event = nullptr;
  check_acl(aclrtCreateEvent(&event), "aclrtCreateEvent");
  check_acl(aclrtRecordEvent(event, signaller), "aclrtRecordEvent");
  check_acl(aclrtStreamWaitEvent(waiter, event), "aclrtStreamWaitEvent");
  check_acl(aclrtDestroyEvent(event), "aclrtDestroyEvent");  // freed once it completes
}

}  // namespace

bool built_with_npu() { return true; }

void run_on_npu(void* stream, int /*nparam*/, void** /*params*/,
                const std::function<void(c10::Device)>& body) {
  int32_t device_index = 0;
  check_acl(aclrtGetDevice(&device_index), "aclrtGetDevice");
  const c10::Device device(c10::DeviceType::PrivateUse1,
                           static_cast<c10::DeviceIndex>(device_index));
  auto ms_stream = static_cast<aclrtStream>(stream);
  aclrtStream torch_stream = c10_npu::getCurrentNPUStream(device.index()).stream();
  order_after(torch_stream, ms_stream);
  body(device);
  order_after(ms_stream, torch_stream);
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
