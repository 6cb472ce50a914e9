"""The GPU demo: ATen's leaky_relu on MindSpore's GPU stream, and a CPU ATen op in a GPU context."""
import mindspore as ms
import numpy as np
import torch
from mindspore import Tensor, nn

import ms_aten


class Net(nn.Cell):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, x):
        return self.op(x)


def main() -> None:
    ms.set_device("GPU")
    data = np.array([[0.0, -0.1], [-0.2, 1.0]], dtype=np.float32)
    expected = torch.nn.functional.leaky_relu(torch.from_numpy(data)).numpy()
    print(f"mindspore {ms.__version__}, torch {torch.__version__} (CUDA {torch.version.cuda})")
    for mode, label in ((ms.GRAPH_MODE, "GPU_GRAPH_MODE"), (ms.PYNATIVE_MODE, "GPU_PYNATIVE_MODE")):
        ms.set_context(mode=mode)
        result = Net(ms_aten.op("leaky_relu"))(Tensor(data)).asnumpy()
        np.testing.assert_allclose(result, expected, rtol=1e-6)
        print(f"{label + ':':24}", np.array2string(result, separator=", "))
    # As the seed's test_cpu_op_in_gpu_device: the CPU ATen kernel while the context is GPU.
    result = Net(ms_aten.op("leaky_relu").set_device("CPU"))(Tensor(data)).asnumpy()
    np.testing.assert_allclose(result, expected, rtol=1e-6)
    print(f"{'CPU_OP_IN_GPU_CONTEXT:':24}", np.array2string(result, separator=", "))


if __name__ == "__main__":
    main()
