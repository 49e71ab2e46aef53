# make bench: synthetic checkpoints, tpshard against cp/cat/a torch splitter (issue 8).
#   make bench                      ~4 GiB Llama-3-8B-shaped checkpoint, 5 interleaved runs per case
#   make bench BENCH_SIZE=30G       ~30 GiB (disk cases only), BENCH_RUNS=3 for a quick run
#   make bench-verify-mem           only verify's memory vs the expert count (16 vs 64 experts)
#   make bench-verify               only cat of the tp 8 shards and verify --whole-model / --layer all
#                                   of them, by the default build, a HAVE_BLAS=0 build and a pip
#                                   install's BLAS (issues 36 and 46; the page is left as it is);
#                                   TPS_VREF_KERNEL=avx2 measures the reference's AVX2 kernel on an
#                                   AVX-512 CPU (the table names the CPU and the kernel, issue 46)
#   make bench-scale-layer          one real-size DeepSeek-V3 MoE layer (FP8, ~11 GB made and deleted)
#   make bench-scale                only the many-tensor cases (5,000 and 50,000 tiny tensors):
#                                   check and reshard must be linear in the tensor count;
#                                   futex calls per tensor counted under strace when it is there
# Other knobs (BENCH_DIR, BENCH_TMPFS, BENCH_COLD, BENCH_TORCH, BENCH_BIN, BENCH_KEEP, BENCH_SCALE): see
# tests/bench/bench.py.  Results: build/bench/results.md, which make bench then puts in place
# of the table in docs/benchmarks.md (between its bench:begin and bench:end lines; make
# bench-scale, a part of the cases, leaves the page as it is).
BENCH_PYTHON ?= /usr/bin/python3

$(BUILD)/bench/benchtool: tests/bench/benchtool.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) -std=c11 -O2 $(WARN) -o $@ $<

# Links the library: what a loaded manifest holds (bench-scale's memory per tensor).
$(BUILD)/bench/manifest_mem: tests/bench/manifest_mem.c $(BUILD)/libtpshard.a
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libtpshard.a $(LDLIBS)

# verify's "before": the same sources built with HAVE_BLAS=0 (the plain loops), in a build
# directory of its own, so that one bench run shows both against cat of the shards.
BENCH_NOBLAS := $(BUILD)/bench/tpshard-noblas
$(BENCH_NOBLAS): $(CMD_OBJ) $(LIB_SRC)
	$(Q)$(MAKE) --no-print-directory HAVE_BLAS=0 BUILD=$(BUILD)/bench/noblas $(BUILD)/bench/noblas/libtpshard.a
	@echo "  LINK    $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $(CMD_OBJ) $(BUILD)/bench/noblas/libtpshard.a $(OPT_LIBS) $(LDLIBS)

BENCH_VARS = BENCH_SIZE BENCH_RUNS BENCH_DIR BENCH_TMPFS BENCH_COLD BENCH_TORCH BENCH_BIN BENCH_KEEP BENCH_SCALE BENCH_DISK_CACHED BENCH_ONLY
# The reference kernel that verify runs, for the table's first line (tests/tools/vref_kernel.c).
BENCH_VREF_KERNEL := $(BUILD)/tests/tools/vref_kernel
bench: tpshard $(BUILD)/bench/benchtool $(BUILD)/bench/manifest_mem $(BENCH_NOBLAS) $(BENCH_VREF_KERNEL)
	$(Q)$(foreach v,$(BENCH_VARS),$(if $($(v)),$(v)='$($(v))')) BENCH_TPSHARD_NOBLAS=$(BENCH_NOBLAS) \
	    $(BENCH_PYTHON) tests/bench/bench.py
	$(Q)$(foreach v,BENCH_RUNS BENCH_KEEP,$(if $($(v)),$(v)='$($(v))')) $(BENCH_PYTHON) tests/bench/verify_mem.py
	$(Q)$(BENCH_PYTHON) tests/bench/bench.py --docs build/bench/results.md docs/benchmarks.md

# One DeepSeek-V3 MoE layer at real size (about 11 GB, FP8), split and verified, then deleted
# (tests/bench/verify_layer.py; BENCH_LAYER_EXPERTS=32 scales it down).  bench-scale is the
# many-tensor cases' name already.
.PHONY: bench-scale-layer
bench-scale-layer: tpshard
	$(Q)$(foreach v,BENCH_DIR BENCH_KEEP BENCH_LAYER_EXPERTS,$(if $($(v)),$(v)='$($(v))')) $(BENCH_PYTHON) tests/bench/verify_layer.py

# verify's speed cases alone (issue 36): BENCH_ONLY=verify, the default build, the plain loops'
# build and a pip install's path (scipy-openblas32, the system's BLAS hidden) side by side
# (issue 46), as make bench does.
.PHONY: bench-verify
bench-verify: tpshard $(BUILD)/bench/benchtool $(BENCH_VREF_KERNEL) $(BENCH_NOBLAS)
	$(Q)$(foreach v,$(BENCH_VARS),$(if $($(v)),$(v)='$($(v))')) BENCH_TPSHARD_NOBLAS=$(BENCH_NOBLAS) \
	    BENCH_ONLY=verify $(BENCH_PYTHON) tests/bench/bench.py

# verify's memory case alone (issue 36; make bench runs it too and adds its table to the page).
.PHONY: bench-verify-mem
bench-verify-mem: tpshard
	$(Q)$(foreach v,BENCH_RUNS BENCH_KEEP,$(if $($(v)),$(v)='$($(v))')) BENCH_APPEND=0 $(BENCH_PYTHON) tests/bench/verify_mem.py

.PHONY: bench-scale
bench-scale: tpshard $(BUILD)/bench/benchtool $(BUILD)/bench/manifest_mem
	$(Q)$(foreach v,$(BENCH_VARS),$(if $($(v)),$(v)='$($(v))')) BENCH_ONLY=scale $(BENCH_PYTHON) tests/bench/bench.py

