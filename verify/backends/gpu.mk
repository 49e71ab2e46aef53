# GPU (CUDA, cuBLAS, NCCL), devsim and MPI verify backends: build rules.
#   make            also builds the plugins whose toolchain the probes found:
#                   build/libtpshard-cuda.so (nvcc, cuBLAS, NCCL) and build/libtpshard-mpi.so (mpicc),
#                   and always build/libtpshard-devsim.so (the device primitives in host memory)
#   make test       compiles and links them too (TEST_DEPS); tests/cli/verify_mpi.sh runs mpirun,
#                   tests/cli/verify_devsim.sh every family on devsim
#   make test-gpu   the CUDA backend against the CPU one on the tiny fixtures; skips loudly without a GPU
#   make gpu-check  Llama-3-8B-shaped two-layer bf16 checkpoint at tp 1, 2, 4, 8 on the GPUs there are,
#                   and the verified shard bytes per second against cat and the pinned link (link_bw)
# Knobs: MPI=0|1 (same as HAVE_MPI), HAVE_CUDA=0|1, CUDA_HOME, NCCL_HOME, NVCC, MPICC,
#        NVCC_GENCODE (default: sm_80 and sm_90 code plus compute_90 PTX for newer GPUs), NVCC_FLAGS.
# The binary never links CUDA or MPI: it dlopens these plugins when a backend asks for them
# (verify/ranks/plugin.h, verify/backends/backend.c), from the build directory, or from $(PREFIX)/lib/tpshard
# after `make install`.  Each plugin has an rpath to the libraries it was built against.

ifneq ($(MPI),)
HAVE_MPI := $(MPI)
endif
# Evaluate each probe once per make run, not at every reference.
HAVE_MPI := $(HAVE_MPI)
HAVE_CUDA := $(HAVE_CUDA)

NVCC_GENCODE ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
                -gencode arch=compute_90,code=compute_90
NVCC_FLAGS ?= -O2
CUDA_PLUGIN := $(BUILD)/libtpshard-cuda.so
MPI_PLUGIN := $(BUILD)/libtpshard-mpi.so
DEVSIM_PLUGIN := $(BUILD)/libtpshard-devsim.so
PLUGIN_HDRS := verify/ranks/plugin.h verify/ranks/comm.h lib/base/dtype.h lib/base/status.h
TPS_PLUGINS := $(DEVSIM_PLUGIN) $(if $(filter 1,$(HAVE_CUDA)),$(CUDA_PLUGIN)) $(if $(filter 1,$(HAVE_MPI)),$(MPI_PLUGIN))
TEST_DEPS += $(TPS_PLUGINS)
OPT_LIBS += -ldl

# Where the binary looks for its plugins (verify/backends/backend.c).
$(BUILD)/verify/backends/backend.o: OPT_CFLAGS += -DTPS_PLUGIN_DIR='"$(PREFIX)/lib/tpshard"' \
    -DTPS_SOURCE_TOP='"$(CURDIR)"' -DTPS_BUILD_DIR='"$(abspath $(BUILD))"'

$(CUDA_PLUGIN): verify/backends/cuda/cuda_backend.cu $(PLUGIN_HDRS)
	@mkdir -p $(dir $@)
	@echo "  NVCC    $<"
	$(Q)$(NVCC) -std=c++17 $(NVCC_FLAGS) $(NVCC_GENCODE) -shared -Xcompiler -fPIC,-Wall,-Wextra -I. \
	    -I$(CUDA_HOME)/include -I$(NCCL_HOME)/include -o $@ $< \
	    -L$(CUDA_HOME)/lib64 -L$(NCCL_HOME)/lib64 -lcublas -lnccl \
	    $(foreach d,$(sort $(CUDA_HOME)/lib64 $(NCCL_HOME)/lib64),-Xlinker -rpath=$(d))

# Built with the binary's flags, sanitizers included, so ASan and TSan see into it.
$(DEVSIM_PLUGIN): verify/backends/devsim/devsim.c $(PLUGIN_HDRS)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(filter-out -MMD -MP,$(ALL_CFLAGS)) -fPIC -shared -o $@ $< $(LDFLAGS) -lpthread

$(MPI_PLUGIN): verify/backends/mpi/mpi_glue.c $(PLUGIN_HDRS)
	@mkdir -p $(dir $@)
	@echo "  MPICC   $<"
	$(Q)$(MPICC) -std=c11 -D_GNU_SOURCE $(WARN) -O2 -fPIC -shared -I. -o $@ $< \
	    $(foreach d,$(shell $(MPICC) --showme:libdirs 2>/dev/null),-Wl,-rpath,$(d))

# The link's rate through a device plugin's own uploads (gpu-check); make test builds it and
# runs it on devsim (tests/cli/verify_devsim.sh), so with the binary's flags, sanitizers
# included: the devsim plugin it opens is built with them.
$(BUILD)/gpu/link_bw: tests/gpu/link_bw.c $(PLUGIN_HDRS)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(filter-out -MMD -MP,$(ALL_CFLAGS)) -o $@ $< $(LDFLAGS) -ldl
TEST_DEPS += $(BUILD)/gpu/link_bw

$(BUILD)/gpu/gen_llama: tests/gpu/gen_llama.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) -std=c11 -D_GNU_SOURCE -O2 $(WARN) -o $@ $< -lm

.PHONY: plugins install-plugins uninstall-plugins test-gpu gpu-check
all: $(TPS_PLUGINS)
plugins: $(TPS_PLUGINS)
install: install-plugins
uninstall: uninstall-plugins

install-plugins: $(TPS_PLUGINS)
	$(if $(strip $(TPS_PLUGINS)),install -d $(DESTDIR)$(PREFIX)/lib/tpshard)
	$(if $(strip $(TPS_PLUGINS)),install -m 755 $(TPS_PLUGINS) $(DESTDIR)$(PREFIX)/lib/tpshard/)

uninstall-plugins:
	rm -f $(DESTDIR)$(PREFIX)/lib/tpshard/libtpshard-cuda.so $(DESTDIR)$(PREFIX)/lib/tpshard/libtpshard-mpi.so \
	    $(DESTDIR)$(PREFIX)/lib/tpshard/libtpshard-devsim.so
	-rmdir $(DESTDIR)$(PREFIX)/lib/tpshard 2>/dev/null

ifeq ($(HAVE_CUDA),1)
test-gpu: tpshard $(CUDA_PLUGIN)
	$(Q)sh tests/gpu/test_gpu.sh

gpu-check: tpshard $(CUDA_PLUGIN) $(BUILD)/gpu/gen_llama $(BUILD)/gpu/link_bw
	$(Q)GEN_LLAMA=$(BUILD)/gpu/gen_llama LINK_BW=$(BUILD)/gpu/link_bw CUDA_PLUGIN=$(abspath $(CUDA_PLUGIN)) \
	    sh tests/gpu/gpu_check.sh
else
test-gpu gpu-check:
	@echo "skip - $@: CUDA with cuBLAS and NCCL not found (CUDA_HOME=$(CUDA_HOME), NCCL_HOME=$(NCCL_HOME)); see make config"
	@$(if $(filter gpu-check,$@),exit 1,true)
endif


# tests/unit/test_verify_devref.c runs the reference's device GEMM on the devsim plugin it dlopens.
$(BUILD)/tests/test_verify_devref: ALL_CFLAGS += -DTPS_DEVSIM_PLUGIN='"$(abspath $(DEVSIM_PLUGIN))"'
$(BUILD)/tests/test_verify_devref: $(DEVSIM_PLUGIN)

# Device plugins of older builds, which the host must refuse with a message naming the ABI
# (tests/cli/verify_devsim.sh): one from before ABI 3 (no exported ABI), one that says it speaks 2.
STALE_PLUGINS := $(BUILD)/tests/stale-abi2/libtpshard-devsim.so $(BUILD)/tests/stale-abi-old/libtpshard-devsim.so
TEST_DEPS += $(STALE_PLUGINS)
$(BUILD)/tests/stale-abi2/libtpshard-devsim.so: STALE_FLAGS := -DSTALE_ABI=2 -DSTALE_EXPORTS_ABI
$(BUILD)/tests/stale-abi-old/libtpshard-devsim.so: STALE_FLAGS := -DSTALE_ABI=2
$(STALE_PLUGINS): tests/gpu/stale_plugin.c
	@mkdir -p $(dir $@)
	@echo "  CC      $< ($(STALE_FLAGS))"
	$(Q)$(CC) -std=c11 $(WARN) -O1 -fPIC -shared $(STALE_FLAGS) -o $@ $<
