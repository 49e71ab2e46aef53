# tpshard: tensor-parallel checkpoint splitter.
#   make            build libtpshard.a and ./tpshard (CPU only; CUDA/NCCL/MPI probed, never required)
#   make test       unit, CLI, malformed-input and interop tests; ends with "N passed, N failed"
#   make demo       split the bundled tiny model and verify it
#   make lint       -Werror build (in build/lint), headers alone, include layering, cited paths
#   make install    PREFIX=/usr/local DESTDIR=
# Switches: SANITIZE=address,undefined  V=1  CUDA_HOME=  NCCL_HOME=  MPI=0|1
PREFIX ?= /usr/local
DESTDIR ?=
BUILD ?= build
CC ?= cc
PKG_CONFIG ?= pkg-config

ifeq ($(V),1)
Q :=
else
Q := @
endif

DEPS_CFLAGS := $(shell $(PKG_CONFIG) --cflags zlib yaml-0.1 2>/dev/null)
DEPS_LIBS := $(shell $(PKG_CONFIG) --libs zlib yaml-0.1 2>/dev/null || echo -lz -lyaml)

WARN := -Wall -Wextra -Wshadow -Wpointer-arith -Wstrict-prototypes -Wmissing-prototypes -Wvla -Wformat=2
CFLAGS ?= -O2 -g
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) $(DEPS_CFLAGS) -I. -MMD -MP
LDLIBS := $(DEPS_LIBS) -lpthread -lm

ifneq ($(SANITIZE),)
ALL_CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SANITIZE)
endif

# lib/'s folders, bottom first: a file of one includes only its own folder and those before it
# (make lint checks it: tests/lint/layering.sh).  base: status, buffers, JSON, YAML queries,
# CRC, dtypes, the tensor index, the pool; partition: the partition algebra, byte spans, the
# partition pool; quant: quantization schemes (one file a family, one table); layout: the
# YAML layout language (schema, rules, evaluation, presets); refusal: refusals grouped by
# cause; set: the manifest as data, planning a set; targets: engine schemas as data,
# adoption; engine: cut, gather, the write step, publishing, reading sets; registry: the
# targets' one table (lib/registry/registry.h) and Megatron-LM's planning (args, mappings,
# its files).
LIB_LAYERS := base partition quant layout refusal set targets engine registry
# formats/'s folders, bottom first, `.` standing for its top files: a file of formats/
# includes only its own folder, those before it and lib/, never cmd/ or verify/ (make lint
# checks it: tests/lint/layering.sh).  .: the writers' output file, strided views, the ZIP
# reader; safetensors; numpy: .npy and .npz (on the ZIP reader); torch: torch.save read and
# written, the pickle reader and writer, the ZIP writer, the .npz-or-torch choice for a ZIP
# file; dcp: PyTorch Distributed Checkpoints (torch's pickle and writer); megatron: legacy and
# torch_dist checkpoints (torch archives, a DCP); open: what sniffs a path and opens whichever
# reader fits (a checkpoint, a shard set).
FORMATS_LAYERS := . safetensors numpy torch dcp megatron open
# verify/'s folders, bottom first, by the same rule (the files at verify/'s top are its face,
# verify/verify.h, and may include any folder).  math: the layer math, pure functions of
# tensors (ops, norms, RoPE, attention kinds, MLA, MoE routing, the float64 reference); load:
# a layer's tensors (names, sources, slices, dequantization, non-finite scan, fused experts);
# ranks: the rank runner, the host side of devices and the device ABI, collectives;
# backends: selection, dlopen, the plugins; driver: layer and whole-model passes, the
# comparison, the blame.
VERIFY_LAYERS := math load ranks backends driver
# The plugins' sources (verify/backends/gpu.mk builds each into its own shared object) stay
# out of libtpshard.a.
VERIFY_PLUGIN_SRC := verify/backends/devsim/devsim.c verify/backends/mpi/mpi_glue.c
LIB_SRC := $(wildcard lib/*.c lib/*/*.c formats/*.c formats/*/*.c) \
    $(filter-out $(VERIFY_PLUGIN_SRC),$(wildcard verify/*.c verify/*/*.c verify/*/*/*.c))
CMD_SRC := $(wildcard cmd/*.c)
# Unit tests are named after the folder they test: tests/unit/test_<area>_<topic>.c, the area
# being the folder's concern (base, layout, partition, quant, set, engine, targets, formats,
# verify: lib/<area>/, formats/, verify/), the topic its module (test_base_json.c,
# test_formats_pickle.c, test_verify_devref.c).  Other tests/unit/*.c are helpers linked into
# every test (UNIT_HELPERS).
UNIT_SRC := $(wildcard tests/unit/test_*.c)
PRESETS := $(wildcard lib/presets/*.yaml)

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/lib/presets_embedded.o
CMD_OBJ := $(CMD_SRC:%.c=$(BUILD)/%.o)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
UNIT_HELPERS := $(filter-out tests/unit/test_%.c,$(wildcard tests/unit/*.c))
UNIT_HELPER_OBJ := $(UNIT_HELPERS:%.c=$(BUILD)/%.o)
# Programs the interop tests drive (linked with the library; tests/run.sh does not run them).
TOOL_SRC := $(wildcard tests/tools/*.c)
TOOL_BIN := $(TOOL_SRC:tests/tools/%.c=$(BUILD)/tests/tools/%)



# Optional GPU and MPI support, found by compiled probes (never needed for the CPU build;
# nothing here queries a GPU).  Override with CUDA_HOME=, NCCL_HOME=, MPICC=, or force with
# HAVE_CUDA=0/1, HAVE_MPI=0/1.  `make config` shows what was found.
CUDA_HOME ?= /usr/local/cuda
NCCL_HOME ?= $(CUDA_HOME)
NVCC ?= $(CUDA_HOME)/bin/nvcc
MPICC ?= mpicc
PROBE_DIR := $(shell mkdir -p $(BUILD) && echo $(BUILD))
HAVE_CUDA ?= $(shell printf '\043include <cublas_v2.h>\n\043include <nccl.h>\nint main(void){return 0;}\n' > $(PROBE_DIR)/.probe_cuda.c && $(CC) -I$(CUDA_HOME)/include -I$(NCCL_HOME)/include $(PROBE_DIR)/.probe_cuda.c -o $(PROBE_DIR)/.probe_cuda -L$(CUDA_HOME)/lib64 -L$(NCCL_HOME)/lib64 -lcublas -lnccl -lcudart >/dev/null 2>&1 && echo 1 || echo 0)
HAVE_MPI ?= $(shell printf '\043include <mpi.h>\nint main(void){return 0;}\n' > $(PROBE_DIR)/.probe_mpi.c && $(MPICC) $(PROBE_DIR)/.probe_mpi.c -o $(PROBE_DIR)/.probe_mpi >/dev/null 2>&1 && echo 1 || echo 0)
# verify's linears use a CBLAS found at run time (verify/math/blas.h says where it looks: the
# system's OpenBLAS, Debian's libopenblas0; scipy-openblas32 beside a pip install), never
# linked and needing no header, so every build has that path and there is nothing to probe:
# the run-time search is the one search.  HAVE_BLAS=0 builds the plain loops alone
# (verify/math/ops_tmpl.h), which make test also exercises (tests/unit/test_verify_gemm.c);
# ops.o is rebuilt when the choice changes.
HAVE_BLAS ?= 1
BLAS_STAMP := $(PROBE_DIR)/.have_blas
$(shell [ "$$(cat $(BLAS_STAMP) 2>/dev/null)" = "$(HAVE_BLAS)" ] || echo $(HAVE_BLAS) > $(BLAS_STAMP))
$(BUILD)/verify/math/ops.o: $(BLAS_STAMP)
$(BUILD)/verify/math/ops.o: OPT_CFLAGS += -DTPS_HAVE_BLAS=$(HAVE_BLAS)

# Optional parts, each in its own fragment next to its code: the GPU and MPI verify backends,
# fuzzing, benchmarks.  A fragment may add objects to LIB_OBJ, flags to OPT_CFLAGS/OPT_LIBS,
# prerequisites of `make test` to TEST_DEPS, and its own targets (all stays the default goal:
# make takes the first target it reads unless .DEFAULT_GOAL is set, and it is set here).
TEST_DEPS :=
.DEFAULT_GOAL := all
include verify/backends/gpu.mk
include tests/fuzz/fuzz.mk
include tests/bench/bench.mk
include cmd/python/python.mk

.PHONY: all test demo bench lint lint-build install uninstall clean deps check-deps config
all: tpshard

tpshard: $(CMD_OBJ) $(BUILD)/libtpshard.a
	@echo "  LINK    $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $(CMD_OBJ) $(BUILD)/libtpshard.a $(OPT_LIBS) $(LDLIBS)

$(BUILD)/libtpshard.a: $(LIB_OBJ)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(ALL_CFLAGS) $(OPT_CFLAGS) -c -o $@ $<

# Built-in layout presets are embedded as C strings so the binary needs no data files.
$(BUILD)/lib/presets_embedded.c: $(PRESETS) lib/presets/embed.sh
	@mkdir -p $(dir $@)
	$(Q)sh lib/presets/embed.sh $(PRESETS) > $@

$(BUILD)/lib/presets_embedded.o: $(BUILD)/lib/presets_embedded.c
	$(Q)$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/tests/%: tests/unit/%.c $(UNIT_HELPER_OBJ) $(BUILD)/libtpshard.a
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $< $(UNIT_HELPER_OBJ) $(BUILD)/libtpshard.a $(OPT_LIBS) $(LDLIBS)

$(BUILD)/tests/tools/%: tests/tools/%.c $(BUILD)/libtpshard.a
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libtpshard.a $(OPT_LIBS) $(LDLIBS)

test: tpshard $(UNIT_BIN) $(TOOL_BIN) $(TEST_DEPS)
	$(Q)sh tests/run.sh

demo: tpshard
	$(Q)sh tests/demo.sh

# Every check runs even when one fails; the last line says "lint: passed" or "lint: FAILED"
# (tests/lint/run.sh lists the checks).  The -Werror build is a make of lint-build with
# BUILD=$(LINT_BUILD), so build/ and ./tpshard are left as they are.
LINT_BUILD ?= $(BUILD)/lint
lint:
	$(Q)MAKE='$(MAKE)' CC='$(CC)' LINT_BUILD='$(LINT_BUILD)' LINT_CFLAGS='$(CFLAGS) -Werror' \
	    HDR_CFLAGS='-std=c11 -D_GNU_SOURCE $(WARN) $(DEPS_CFLAGS)' sh tests/lint/run.sh

# What make test compiles with $(CC), short of linking ./tpshard.
lint-build: $(LIB_OBJ) $(CMD_OBJ) $(UNIT_BIN) $(TOOL_BIN) $(REPLAY_BIN)

install: tpshard
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 tpshard $(DESTDIR)$(PREFIX)/bin/tpshard
	install -m 644 cmd/tpshard.1 $(DESTDIR)$(PREFIX)/share/man/man1/tpshard.1

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/tpshard $(DESTDIR)$(PREFIX)/share/man/man1/tpshard.1

config:
	@echo "CC        $(CC)"
	@echo "CUDA      $(if $(filter 1,$(HAVE_CUDA)),cuBLAS and NCCL headers and libraries compile and link (CUDA_HOME=$(CUDA_HOME), NCCL_HOME=$(NCCL_HOME)),not found (CUDA_HOME=$(CUDA_HOME)))"
	@echo "MPI       $(if $(filter 1,$(HAVE_MPI)),found ($(MPICC)),not found (MPICC=$(MPICC)))"
	@echo "BLAS      $(if $(filter 1,$(HAVE_BLAS)),looked for when verify runs (verify/math/blas.h); here: $(or $(shell ldconfig -p 2>/dev/null | grep -o 'libopenblas.so.0\|libcblas.so.3' | head -n 1),none in the system),HAVE_BLAS=0: verify's plain loops only)"

clean:
	rm -rf $(BUILD) tpshard

-include $(LIB_OBJ:.o=.d) $(CMD_OBJ:.o=.d)
