"""The torch archive writer read by Debian torch 1.13 (torch.load with its full unpickler)
and Python 3's pickle and zipfile; see torch_write_cases.py for what is checked and how.
float8 is not in torch 1.13: torch2_torch_write.py covers _rebuild_tensor_v3."""
import sys

import torch

import torch_write_cases as cases

if __name__ == "__main__":
    sys.exit(cases.run("torch %s" % torch.__version__, lambda p: torch.load(p), float8=False))
