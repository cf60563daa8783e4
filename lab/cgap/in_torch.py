"""cgap's timing (cgap.c, built as libcgap.so) from inside a Python
process, to tell what of a PyTorch rank process moves the step's time:

    tprun --tp 1 -- python3 lab/cgap/in_torch.py MODE [cgap flags]

MODE: plain (no PyTorch), import (import torch only), init (PyTorch
initializes CUDA on the job's device first), alloc (as init, plus 4 GiB
through PyTorch's caching allocator)."""
import ctypes
import os
import sys

mode = sys.argv[1] if len(sys.argv) > 1 else "plain"
if mode not in ("plain", "import", "init", "alloc"):
    sys.exit(f"in_torch.py: mode {mode!r} is not plain, import, init or alloc")
keep = None
if mode != "plain":
    import torch
if mode in ("init", "alloc"):
    dev = int(os.environ.get("TPRUN_DEVICE", os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(dev)
    keep = torch.randn(1024, device="cuda").sum()
    torch.cuda.synchronize()
if mode == "alloc":
    keep = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
lib = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "libcgap.so"))
args = [b"cgap"] + [a.encode() for a in sys.argv[2:]]
argv = (ctypes.c_char_p * (len(args) + 1))(*args, None)
print(f"# in_torch.py mode {mode}", flush=True)
rc = lib.cgap_main(len(args), argv)
sys.stdout.flush()
sys.exit(rc)
