// A stand-in for MindSpore's AOT kernel: it calls libms_aten.so's extern "C" entry points the way
// MindSpore 2.10's CustomAOT kernels do, without MindSpore, so that ms_aten's side of the AOT
// contract runs where MindSpore cannot (a GPU machine with a CUDA torch but no MindSpore GPU
// runtime; scripts/gpu_check.sh), and is checked on the CPU in tests/test_aot_launcher.py.
//
// What MindSpore does, and where this file does the same (MindSpore 2.10's sources:
// [cpu] mindspore/ops/kernel/cpu/custom/kernel_mod_impl/custom_aot_cpu_kernel.cc,
// [gpu] mindspore/ops/kernel/gpu/custom/kernel_mod_impl/custom_aot_gpu_kernel.h (installed with
//      MindSpore under include/mindspore/),
// [extra] mindspore/ccsrc/utils/custom_aot_extra.h, also installed):
//  1. dlopen(path, RTLD_LAZY | RTLD_LOCAL) the library named by the primitive's func_name
//     "path:func" ([cpu] Init, [gpu] Init): main().
//  2. Per kernel, at build time: one shape vector and one dtype string per input, then per output
//     (TypeIdToString(dtype, true): "float32", "int64", ...), ndims[i] their ranks, shapes[i]
//     = &shape_list_[i][0] (no storage for a rank-0 shape) ([cpu] Init): Kernel::init.
//  3. attrs_.SetKernelPrim(primitive_): the AotExtra handed to the kernel reads the primitive's
//     attributes (ms_aten's op spec "ms_aten_spec", its site "ms_aten_uid") ([extra]
//     AotExtraImpl): PrimitiveAttrs.
//  4. dlsym(func + "Init"); if present, call it once with (ndims, shapes, dtypes, &attrs_),
//     catching std::exception; a non-zero return is an error ([cpu] Init): Kernel::init.
//  5. Per launch: params = the inputs' device pointers, then the outputs', then the workspaces'
//     (ms_aten asks for none); dlsym(func); call it with (nparam, params, ndims, shapes, dtypes,
//     stream, &attrs_): stream is nullptr on the CPU ([cpu] Launch) and the kernel's CUDA stream
//     on the GPU ([gpu] Launch); a std::exception or a non-zero return is an error:
//     Kernel::launch.
//  6. When the kernel goes away, attrs_.DestructKernelData() deletes what Init attached to
//     AotExtra::kernel_data_ ([cpu] ~CustomAOTCpuKernelMod): Kernel::~Kernel.
// MindSpore also calls <func>InferShape while it compiles a graph, from Python's shape notes;
// that is not part of a launch, and the output shapes come from the plan here.
// A whole program is registered first, as ms_aten's Python does before MindSpore builds its kernel
// (ms_aten/programs/runtime/family.py, register): ms_aten_program_register(family, key, call, vjp).
//
// AotExtra crosses the boundary as a C++ object whose virtual functions take std::string, in the
// pre-C++11 ABI MindSpore is built with: this file must be compiled with
// -D_GLIBCXX_USE_CXX11_ABI=0, as csrc/boundary/extra_abi0.cpp is.
//
// Usage: launcher [--device cpu|cuda] [--no-gate] LIBMS_ATEN PLAN
//   --no-gate runs gated launches as plain ones (under compute-sanitizer).
// PLAN: one directive per line, files relative to the plan's folder; '#' starts a comment.
//   register <family> <key file> <call spec file> <vjp spec file>
//   kernel <label> <entry>           a new kernel; entry MsAtenCall or MsAtenCallMulti, the CUDA
//                                    entry (MsAtenCallCuda[Multi]) with --device cuda
//   attr str <name> <file>           a string attribute of the primitive, the file's text
//   attr int <name> <value>
//   in <dtype> <shape> <file> [host] an input (shape "2,3"; "-" for rank 0), its bytes from the
//                                    file; `host`: left in host memory on the CUDA kernel
//   out <dtype> <shape> <file>       an output, its bytes written to the file after each launch
//   launch [gated]                   Init on the first launch, then one launch
//   time <n>                         after a launch: n more launches back to back on the
//                                    buffers as they are (no upload, no download), then the
//                                    stream synchronized; prints
//                                    time <label> n=<n> ms=<wall time per launch> [error=<text>]
// Each launch prints one line:
//   launch <label> rc=<n> ms=<host time> [queued=<0|1>] [error=<text>]
// rc: the entry point's return value, -1 when it threw (MindSpore reports both as a failure).
// `gated` (CUDA): the inputs are uploaded, and the outputs filled with 0xff, on the kernel's
// stream behind a host function that holds the stream until the launch has returned (or 5 s have
// passed); queued=1 when the launch returned with the stream still held, that is, without
// waiting for the device or the stream. The outputs are then read after an event recorded on the
// stream: they are right only if ATen's work was ordered on that stream.
// Exit status: 0 once the plan ran (whatever the launches returned), 2 for a bad plan or setup.
#if defined(_GLIBCXX_USE_CXX11_ABI) && _GLIBCXX_USE_CXX11_ABI != 0
#error "build with -D_GLIBCXX_USE_CXX11_ABI=0: MindSpore's AotExtra uses the old std::string ABI"
#endif

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#ifdef WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace mindspore {

// [extra]: the layout libms_aten.so relies on (the same virtual functions in the same order, the
// same data members).
class AotKernelData {
 public:
  AotKernelData() = default;
  virtual ~AotKernelData() = default;
};

class AotExtra {
 public:
  AotExtra() = default;
  virtual ~AotExtra() = default;
  virtual bool HasAttr(std::string name) = 0;
  void DestructKernelData() {
    delete kernel_data_;
    kernel_data_ = nullptr;
  }

 private:
  virtual bool GetAttrBool(std::string name) = 0;
  virtual int64_t GetAttrInt(std::string name) = 0;
  virtual float GetAttrFloat(std::string name) = 0;
  virtual std::string GetAttrStr(std::string name) = 0;
  virtual std::vector<int64_t> GetAttrIntVec(std::string name) = 0;
  virtual std::vector<float> GetAttrFloatVec(std::string name) = 0;
  virtual std::vector<std::vector<int64_t>> GetAttrInt2DVec(std::string name) = 0;
  virtual std::vector<std::vector<float>> GetAttrFloat2DVec(std::string name) = 0;
  std::vector<size_t> workspace_;
  AotKernelData* kernel_data_{nullptr};
};

}  // namespace mindspore

namespace {

using AotFunc = int (*)(int, void**, int*, int64_t**, const char**, void*, void*);
using InitFunc = int (*)(int*, int64_t**, const char**, mindspore::AotExtra*);
using RegisterFunc = int (*)(const char*, const char*, const char*, const char*, char*, size_t);

[[noreturn]] void fail(const std::string& why) { throw std::runtime_error(why); }

// The primitive's attributes, as AotExtraImpl reads them; a missing one throws as MindSpore's
// getters do (MS_LOG(EXCEPTION)).
class PrimitiveAttrs final : public mindspore::AotExtra {
 public:
  std::map<std::string, std::string> strings;
  std::map<std::string, int64_t> ints;

  bool HasAttr(std::string name) final { return strings.count(name) || ints.count(name); }

 private:
  bool GetAttrBool(std::string name) final { return GetAttrInt(name) != 0; }
  int64_t GetAttrInt(std::string name) final { return find(ints, name); }
  float GetAttrFloat(std::string name) final { return missing<float>(name); }
  std::string GetAttrStr(std::string name) final { return find(strings, name); }
  std::vector<int64_t> GetAttrIntVec(std::string name) final {
    return missing<std::vector<int64_t>>(name);
  }
  std::vector<float> GetAttrFloatVec(std::string name) final {
    return missing<std::vector<float>>(name);
  }
  std::vector<std::vector<int64_t>> GetAttrInt2DVec(std::string name) final {
    return missing<std::vector<std::vector<int64_t>>>(name);
  }
  std::vector<std::vector<float>> GetAttrFloat2DVec(std::string name) final {
    return missing<std::vector<std::vector<float>>>(name);
  }

  template <class Map>
  static typename Map::mapped_type find(const Map& map, const std::string& name) {
    const auto it = map.find(name);
    return it == map.end() ? missing<typename Map::mapped_type>(name) : it->second;
  }
  template <class T>
  [[noreturn]] static T missing(const std::string& name) {
    fail("For 'Custom', there is no attribute called " + name + "! ");
  }
};

size_t element_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"bool", 1},     {"int8", 1},    {"uint8", 1},   {"int16", 2},     {"uint16", 2},
      {"int32", 4},    {"uint32", 4},  {"int64", 8},   {"uint64", 8},    {"float16", 2},
      {"bfloat16", 2}, {"float32", 4}, {"float64", 8}, {"complex64", 8}, {"complex128", 16}};
  const auto it = sizes.find(dtype);
  if (it == sizes.end()) fail("unknown dtype '" + dtype + "'");
  return it->second;
}

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) fail("cannot read " + path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

void write_file(const std::string& path, const void* data, size_t size) {
  std::ofstream file(path, std::ios::binary);
  file.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!file) fail("cannot write " + path);
}

// A message on one line of the launcher's output.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

std::vector<int64_t> parse_shape(const std::string& text) {
  std::vector<int64_t> shape;
  if (text == "-") return shape;
  std::istringstream sizes(text);
  for (std::string size; std::getline(sizes, size, ',');) shape.push_back(std::stoll(size));
  return shape;
}

// Where buffers live: host memory, or one CUDA device and a stream of MindSpore's kind.
class Device {
 public:
  explicit Device(bool cuda) : cuda_(cuda) {
#ifdef WITH_CUDA
    if (!cuda_) return;
    check(cudaSetDevice(0), "cudaSetDevice(0)");
    // A non-blocking stream: work ATen put on the legacy default stream would not wait for it.
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
#else
    if (cuda_) fail("this launcher was built without CUDA (-DWITH_CUDA)");
#endif
  }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device() {
#ifdef WITH_CUDA
    for (void* block : device_blocks_) cudaFree(block);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
#endif
  }

  bool cuda() const { return cuda_; }
  void* stream() const { return cuda_ ? static_cast<void*>(stream_) : nullptr; }

  void* allocate(size_t bytes, bool host) {
    if (bytes == 0) return nullptr;  // a zero-size tensor: no buffer
    if (!cuda_ || host) {
      host_blocks_.emplace_back(new char[bytes]);
      return host_blocks_.back().get();
    }
#ifdef WITH_CUDA
    void* data = nullptr;
    check(cudaMalloc(&data, bytes), "cudaMalloc");
    device_blocks_.push_back(data);
    return data;
#endif
    return nullptr;
  }

  // Synchronous copies, outside any launch.
  void upload(void* to, const std::string& bytes, bool host) {
    if (bytes.empty()) return;
    if (!cuda_ || host) {
      std::memcpy(to, bytes.data(), bytes.size());
      return;
    }
#ifdef WITH_CUDA
    check(cudaMemcpy(to, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "upload");
#endif
  }
  std::string download(const void* from, size_t bytes, bool host) {
    std::string out(bytes, '\0');
    if (bytes == 0) return out;
    if (!cuda_ || host) {
      std::memcpy(out.data(), from, bytes);
      return out;
    }
#ifdef WITH_CUDA
    check(cudaMemcpy(out.data(), from, bytes, cudaMemcpyDeviceToHost), "download");
#endif
    return out;
  }

#ifdef WITH_CUDA
  static void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) fail(std::string(what) + ": " + cudaGetErrorString(status));
  }
#endif

 private:
  bool cuda_;
#ifdef WITH_CUDA
  cudaStream_t stream_ = nullptr;
#else
  void* stream_ = nullptr;
#endif
  std::vector<std::unique_ptr<char[]>> host_blocks_;
  std::vector<void*> device_blocks_;
};

#ifdef WITH_CUDA
// Holds a stream until opened (or 5 s have passed): a host function on the stream that waits, so
// that everything queued behind it waits too.
class Gate {
 public:
  explicit Gate(cudaStream_t stream) {
    Device::check(cudaLaunchHostFunc(stream, &Gate::hold, this), "the gate");
  }
  void open() { opened_ = true; }
  bool timed_out() const { return timed_out_; }

 private:
  static void hold(void* self) {
    auto* gate = static_cast<Gate*>(self);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!gate->opened_) {
      if (std::chrono::steady_clock::now() > deadline) {
        gate->timed_out_ = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  std::atomic<bool> opened_{false};
  std::atomic<bool> timed_out_{false};
};
#endif

struct Buffer {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string file;
  bool host = false;
  size_t bytes = 0;
  void* data = nullptr;
};

// One CustomAOT kernel: its buffers, attributes and entry points.
class Kernel {
 public:
  Kernel(std::string label, AotFunc func, InitFunc init, Device& device)
      : label_(std::move(label)), func_(func), init_(init), device_(device) {}
  ~Kernel() { attrs_.DestructKernelData(); }  // step 6
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  PrimitiveAttrs& attrs() { return attrs_; }

  void add_buffer(bool output, const std::string& dtype, const std::string& shape,
                  const std::string& file, bool host) {
    if (initialized_) fail("kernel " + label_ + ": a buffer after its first launch");
    if (!output && !outputs_.empty()) fail("kernel " + label_ + ": an input after an output");
    Buffer b{dtype, parse_shape(shape), file, host};
    b.bytes = element_size(dtype);
    for (int64_t size : b.shape) b.bytes *= static_cast<size_t>(size);
    b.data = device_.allocate(b.bytes, host);
    (output ? outputs_ : inputs_).push_back(std::move(b));
  }

  void launch([[maybe_unused]] bool gated) {
    std::string error;
    int rc = initialized_ ? 0 : init(&error);
    std::vector<std::string> staged;
    for (const Buffer& b : inputs_) {
      staged.push_back(read_file(b.file));
      if (staged.back().size() != b.bytes) {
        fail(b.file + " holds " + std::to_string(staged.back().size()) +
             " bytes, the input needs " + std::to_string(b.bytes));
      }
    }
    std::vector<void*> params;  // step 5: inputs, then outputs
    for (const Buffer& b : inputs_) params.push_back(b.data);
    for (const Buffer& b : outputs_) params.push_back(b.data);
    double ms = 0;
    std::string queued;
#ifdef WITH_CUDA
    if (rc == 0 && gated && device_.cuda()) {
      queued = gated_launch(staged, params, &rc, &error, &ms) ? " queued=1" : " queued=0";
    }
#endif
    if (rc == 0 && queued.empty()) {
      for (size_t i = 0; i < inputs_.size(); ++i) {
        device_.upload(inputs_[i].data, staged[i], inputs_[i].host);
      }
#ifdef WITH_CUDA
      // A copy from pageable memory may return before it lands; the kernel's stream does not
      // wait for the legacy stream it went on.
      if (device_.cuda()) Device::check(cudaDeviceSynchronize(), "the uploads");
#endif
      timed_launch(params, &rc, &error, &ms);
    }
#ifdef WITH_CUDA
    if (device_.cuda()) {
      Device::check(cudaStreamSynchronize(static_cast<cudaStream_t>(device_.stream())),
                    "the stream after the launch");
    }
#endif
    for (const Buffer& b : outputs_) {
      const std::string bytes = device_.download(b.data, b.bytes, b.host);
      write_file(b.file, bytes.data(), bytes.size());
    }
    std::printf("launch %s rc=%d ms=%.3f%s%s%s\n", label_.c_str(), rc, ms, queued.c_str(),
                error.empty() ? "" : " error=", one_line(error).c_str());
  }

  // The benchmark: n launches, then the stream synchronized, so that the time is the device's
  // work as well as the host's.
  void time(int n) {
    if (!initialized_) fail("kernel " + label_ + ": 'time' before its first launch");
    std::vector<void*> params;
    for (const Buffer& b : inputs_) params.push_back(b.data);
    for (const Buffer& b : outputs_) params.push_back(b.data);
    std::string error;
    int rc = 0;
    double ms = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < n && rc == 0; ++i) timed_launch(params, &rc, &error, &ms);
#ifdef WITH_CUDA
    if (device_.cuda()) {
      Device::check(cudaStreamSynchronize(static_cast<cudaStream_t>(device_.stream())),
                    "the stream after the timed launches");
    }
#endif
    const double total =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("time %s n=%d ms=%.3f%s%s\n", label_.c_str(), n, total / n,
                error.empty() ? "" : " error=", one_line(error).c_str());
  }

 private:
  // Steps 2 and 4: the buffers' descriptions, then <func>Init once.
  int init(std::string* error) {
    for (const auto* list : {&inputs_, &outputs_}) {
      for (const Buffer& b : *list) {
        ndims_.push_back(static_cast<int>(b.shape.size()));
        shapes_.push_back(b.shape.empty() ? nullptr : const_cast<int64_t*>(b.shape.data()));
        dtypes_.push_back(b.dtype.c_str());
      }
    }
    initialized_ = true;
    if (init_ == nullptr) return 0;
    return call([&] { return init_(ndims_.data(), shapes_.data(), dtypes_.data(), &attrs_); },
                error);
  }

  // Runs body as MindSpore runs an AOT entry point: its return value, or -1 with what() when it
  // threw.
  template <class Body>
  static int call(Body&& body, std::string* error) {
    try {
      const int rc = body();
      if (rc != 0) *error = "returned " + std::to_string(rc);
      return rc;
    } catch (const std::exception& e) {
      *error = e.what();
      return -1;
    }
  }

  void timed_launch(std::vector<void*>& params, int* rc, std::string* error, double* ms) {
    const auto start = std::chrono::steady_clock::now();
    *rc = call(
        [&] {
          return func_(static_cast<int>(params.size()), params.data(), ndims_.data(),
                       shapes_.data(), dtypes_.data(), device_.stream(), &attrs_);
        },
        error);
    *ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }

#ifdef WITH_CUDA
  // The launch queued behind a gate; true when it returned before the gate opened.
  bool gated_launch(const std::vector<std::string>& staged, std::vector<void*>& params, int* rc,
                    std::string* error, double* ms) {
    const auto stream = static_cast<cudaStream_t>(device_.stream());
    // Stale inputs first: a kernel that ran before the gate opened would read these.
    for (const Buffer& b : inputs_) {
      if (!b.host && b.bytes) Device::check(cudaMemset(b.data, 0xff, b.bytes), "stale inputs");
    }
    // Pinned staging memory, so that the uploads queue; allocated before the gate, since a
    // page-locked allocation may wait for the device.
    std::vector<void*> pinned(inputs_.size(), nullptr);
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const Buffer& b = inputs_[i];
      if (b.host) std::memcpy(b.data, staged[i].data(), b.bytes);
      if (b.host || b.bytes == 0) continue;
      Device::check(cudaMallocHost(&pinned[i], b.bytes), "cudaMallocHost");
      std::memcpy(pinned[i], staged[i].data(), b.bytes);
    }
    cudaEvent_t done;
    Device::check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    Device::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize before the gate");
    Gate gate(stream);
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const Buffer& b = inputs_[i];
      if (pinned[i] == nullptr) continue;
      Device::check(cudaMemcpyAsync(b.data, pinned[i], b.bytes, cudaMemcpyHostToDevice, stream),
                    "upload behind the gate");
    }
    for (const Buffer& b : outputs_) {
      if (!b.host && b.bytes) {
        Device::check(cudaMemsetAsync(b.data, 0xff, b.bytes, stream), "outputs behind the gate");
      }
    }
    timed_launch(params, rc, error, ms);
    const bool queued = !gate.timed_out();
    Device::check(cudaEventRecord(done, stream), "cudaEventRecord");
    gate.open();
    Device::check(cudaEventSynchronize(done), "cudaEventSynchronize");  // the results, in order
    cudaEventDestroy(done);
    for (void* block : pinned) cudaFreeHost(block);
    return queued;
  }
#endif

  std::string label_;
  AotFunc func_;
  InitFunc init_;
  Device& device_;
  PrimitiveAttrs attrs_;
  std::vector<Buffer> inputs_;
  std::vector<Buffer> outputs_;
  std::vector<int> ndims_;
  std::vector<int64_t*> shapes_;
  std::vector<const char*> dtypes_;
  bool initialized_ = false;
};

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

void* symbol(void* library, const std::string& name) {
  dlerror();
  void* found = dlsym(library, name.c_str());
  return dlerror() == nullptr ? found : nullptr;
}

int run(int argc, char** argv) {
  bool cuda = false;
  bool gates = true;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--device" && i + 1 < argc) {
      const std::string device = argv[++i];
      if (device != "cpu" && device != "cuda") fail("--device takes cpu or cuda");
      cuda = device == "cuda";
    } else if (arg == "--no-gate") {
      gates = false;
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 2) fail("usage: launcher [--device cpu|cuda] [--no-gate] LIB PLAN");
  void* library = dlopen(positional[0].c_str(), RTLD_LAZY | RTLD_LOCAL);  // step 1
  if (library == nullptr) fail(dlerror());
  Device device(cuda);
  const std::string folder = folder_of(positional[1]);
  std::istringstream plan(read_file(positional[1]));
  std::unique_ptr<Kernel> kernel;
  for (std::string line; std::getline(plan, line);) {
    std::istringstream words(line);
    std::string verb;
    if (!(words >> verb) || verb[0] == '#') continue;
    if (verb == "register") {
      std::string family, key, call, vjp;
      words >> family >> key >> call >> vjp;
      auto reg = reinterpret_cast<RegisterFunc>(symbol(library, "ms_aten_program_register"));
      if (reg == nullptr) fail("the library has no ms_aten_program_register");
      char error[4096] = "";
      const int rc =
          reg(family.c_str(), read_file(folder + key).c_str(), read_file(folder + call).c_str(),
              read_file(folder + vjp).c_str(), error, sizeof error);
      std::printf("register %s rc=%d%s%s\n", family.c_str(), rc, rc ? " error=" : "",
                  one_line(error).c_str());
    } else if (verb == "kernel") {
      std::string label, entry;
      words >> label >> entry;
      if (cuda) entry.insert(std::strlen("MsAtenCall"), "Cuda");  // MsAtenCall[Multi] on GPU
      auto func = reinterpret_cast<AotFunc>(symbol(library, entry));
      if (func == nullptr) fail("the library has no entry point " + entry);
      kernel.reset();  // the previous kernel goes, as MindSpore's KernelMod does
      kernel = std::make_unique<Kernel>(
          label, func, reinterpret_cast<InitFunc>(symbol(library, entry + "Init")), device);
    } else if (!kernel) {
      fail("'" + verb + "' before any kernel");
    } else if (verb == "attr") {
      std::string type, name, value;
      words >> type >> name >> value;
      if (type == "str") {
        kernel->attrs().strings[name] = read_file(folder + value);
      } else {
        kernel->attrs().ints[name] = std::stoll(value);
      }
    } else if (verb == "in" || verb == "out") {
      std::string dtype, shape, file, place;
      words >> dtype >> shape >> file >> place;
      kernel->add_buffer(verb == "out", dtype, shape, folder + file, place == "host");
    } else if (verb == "launch") {
      std::string mode;
      words >> mode;
      kernel->launch(gates && mode == "gated");
    } else if (verb == "time") {
      int n = 0;
      if (!(words >> n) || n < 1) fail("'time' takes a number of launches");
      kernel->time(n);
    } else {
      fail("unknown directive '" + verb + "'");
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "launcher: %s\n", e.what());
    return 2;
  }
}
