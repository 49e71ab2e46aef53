# The Python distribution's binary (pyproject.toml; cmd/python/tpshard_build.py runs this).
#   make py-bin     $(BUILD)/py/tpshard: ./tpshard's objects linked with zlib and libyaml from
#                   their static archives (libz.a, libyaml.a) and stripped, so the wheel's binary
#                   needs only the C library; and the devsim plugin the wheel carries beside it
# PY_STATIC_LIBS=  (empty: link them dynamically, as ./tpshard does; the wheel's tag then says
# linux_<arch>, not manylinux: tpshard_build.py reads what the binary needs).
PY_STATIC_LIBS ?= -Wl,-Bstatic -lyaml -lz -Wl,-Bdynamic
PY_BIN := $(BUILD)/py/tpshard

$(PY_BIN): $(CMD_OBJ) $(BUILD)/libtpshard.a
	@mkdir -p $(dir $@)
	@echo "  LINK    $@"
	$(Q)$(CC) $(LDFLAGS) -s -o $@ $(CMD_OBJ) $(BUILD)/libtpshard.a $(OPT_LIBS) \
	    $(if $(strip $(PY_STATIC_LIBS)),$(PY_STATIC_LIBS),$(DEPS_LIBS)) -lpthread -lm

.PHONY: py-bin
py-bin: $(PY_BIN) $(DEVSIM_PLUGIN)
