# GPU (CUDA, cuBLAS, NCCL) and MPI verify backends: build rules (issue 6).
