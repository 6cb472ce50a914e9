"""The seed demo: ATen's leaky_relu as a MindSpore op inside an nn.Cell, in both modes."""
import mindspore as ms
import numpy as np
import torch
from mindspore import Tensor, nn

import ms_aten  # imports torch first, then checks the bridge library


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.leaky_relu = ms_aten.op("leaky_relu")

    def construct(self, x):
        return self.leaky_relu(x)


def main() -> None:
    data = np.array([[0.0, -0.1], [-0.2, 1.0]], dtype=np.float32)
    expected = torch.nn.functional.leaky_relu(torch.from_numpy(data)).numpy()
    ms.set_device("CPU")
    print(f"mindspore {ms.__version__}, torch {torch.__version__}")
    print("torch eager:   ", np.array2string(expected, separator=", "))
    for mode, label in ((ms.GRAPH_MODE, "GRAPH_MODE"), (ms.PYNATIVE_MODE, "PYNATIVE_MODE")):
        ms.set_context(mode=mode)
        result = Net()(Tensor(data)).asnumpy()
        np.testing.assert_allclose(result, expected, rtol=1e-6)
        print(f"{label + ':':15}", np.array2string(result, separator=", "))


if __name__ == "__main__":
    main()
