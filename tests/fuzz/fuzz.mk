# Fuzz targets, their replay under gcc in make test, and make fuzz (issue 9).
#   make test                 builds $(BUILD)/fuzz/replay_<target> with $(CC); tests/cli/fuzz_replay.sh
#                             runs every tests/fuzz/corpus/<target>/ file through it
#   make fuzz FUZZ_SECONDS=N  builds each target with clang -fsanitize=fuzzer,address,undefined in
#                             $(FUZZ_BUILD) (apart from the gcc build) and runs it N seconds
#                             (FUZZ_TARGETS= picks some); new inputs go to $(FUZZ_BUILD)/corpus/<t>,
#                             crashes to $(FUZZ_BUILD)/artifacts/<t>/
FUZZ_TARGETS ?= safetensors json zip pickle npy layout manifest checkpoint dcp
FUZZ_ALL := safetensors json zip pickle npy layout manifest checkpoint dcp
FUZZ_SECONDS ?= 60
FUZZ_BUILD ?= $(BUILD)/fuzz-clang
FUZZ_CC ?= clang
FUZZ_COMMON := tests/fuzz/fuzz_common.c

REPLAY_BIN := $(FUZZ_ALL:%=$(BUILD)/fuzz/replay_%)
TEST_DEPS += $(REPLAY_BIN)

$(BUILD)/fuzz/replay_%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c $(FUZZ_COMMON) tests/fuzz/fuzz.h $(BUILD)/libtpshard.a
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $< tests/fuzz/replay.c $(FUZZ_COMMON) $(BUILD)/libtpshard.a $(OPT_LIBS) $(LDLIBS)

# Built by the inner make below, where CC is clang and every library object carries
# -fsanitize=fuzzer-no-link plus ASan and UBSan.
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_COMMON) tests/fuzz/fuzz.h $(BUILD)/libtpshard.a
	@mkdir -p $(dir $@)
	@echo "  FUZZ    $@"
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_COMMON) $(BUILD)/libtpshard.a $(OPT_LIBS) $(LDLIBS)

.PHONY: fuzz fuzz-build
fuzz-build:
	$(Q)$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) SANITIZE=address,undefined \
		CFLAGS="-O1 -g -fsanitize=fuzzer-no-link" HAVE_CUDA=0 HAVE_MPI=0 \
		$(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz/fuzz_%)

fuzz: fuzz-build
	$(Q)sh tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

