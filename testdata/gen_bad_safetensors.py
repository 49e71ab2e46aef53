#!/usr/bin/python3
"""Writes the safetensors malformed-file catalogue: testdata/bad/safetensors/*.safetensors
and testdata/bad/safetensors/CASES.

Standard library only, and every file is built byte by byte here, so the catalogue does
not depend on tpshard or on the safetensors package.  Each case breaks exactly one rule of
the format or of the reference reader, safetensors/src/tensor.rs (must-fail, exit 3), or is
an edge case the reference reader accepts (must-load, exit 0).

CASES format (shared by every testdata/bad/<format>/CASES; replayed by
tests/cli/bad_inputs.sh): one case per line, TAB-separated columns
    FILE  EXIT  FRAGMENT  [SUBCOMMAND]
FILE is relative to the CASES file's folder; EXIT is the expected exit status; FRAGMENT is
text that must appear in stderr when EXIT is non-zero, or in stdout when EXIT is 0 (may be
empty); SUBCOMMAND defaults to inspect.  Lines starting with '#' and blank lines are skipped.

Usage: python3 testdata/gen_bad_safetensors.py   (from anywhere; rewrites the folder)
"""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bad", "safetensors")


def hj(obj):
    """Compact JSON, as the reference writer emits it."""
    return json.dumps(obj, separators=(",", ":")).encode()


def st(header, data=b"", n=None):
    """A file: u64 LE header length (n, or the real length), header bytes, data bytes."""
    return struct.pack("<Q", len(header) if n is None else n) + header + data


def t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


ONE = {"w": t("F32", [2], 0, 8)}  # a valid one-tensor header with 8 bytes of data
D8 = bytes(range(8))

# (file name, contents, expected exit, message fragment)
FAIL = [
    # size checks (§1.3 rules 1-3) and truncation in every region
    ("empty_file", b"", "too short for the 8-byte header length"),
    ("trunc_in_prefix", b"\x10\x00\x00\x00\x00", "too short for the 8-byte header length"),
    ("header_len_2p63", st(hj(ONE), D8, n=1 << 63), "exceeds the limit of 100000000"),
    ("header_len_over_cap", st(hj(ONE), D8, n=100_000_001), "exceeds the limit of 100000000"),
    ("header_len_past_eof", struct.pack("<Q", 60), "needs 68 bytes but the file has 8"),
    ("trunc_in_header", st(hj(ONE), D8)[:8 + 10], "but the file has 18"),
    ("trunc_in_data", st(hj(ONE), D8)[:-1], "truncated"),
    ("trunc_in_second_tensor",
     st(hj({"a": t("F32", [2], 0, 8), "b": t("F32", [2], 8, 16)}), bytes(12)), "truncated"),
    ("offsets_past_end", st(hj({"w": t("U8", [400], 0, 400)}), D8), "needs 400 bytes after the header"),
    # header text (§1.3 rules 4-5)
    ("header_empty", st(b""), "expected a value"),
    ("header_not_object", st(b"[]"), "not a JSON object"),
    ("invalid_utf8", st(b'{"\xff":' + hj(ONE["w"]) + b"}", D8), "invalid UTF-8"),
    ("overlong_utf8", st(b'{"\xc0\xaf":' + hj(ONE["w"]) + b"}", D8), "invalid UTF-8"),
    ("lone_surrogate", st(b'{"\\ud800":' + hj(ONE["w"]) + b"}", D8), "lone surrogate"),
    ("utf8_bom", st(b"\xef\xbb\xbf" + hj(ONE), D8), "JSON header at file offset 8: byte 0"),
    ("nul_padding", st(hj(ONE) + b"\0\0\0\0", D8), "expected the end of input"),
    ("garbage_after_json", st(hj(ONE) + b" x", D8), "expected the end of input"),
    ("dup_tensor_key", st(b'{"w":' + hj(ONE["w"]) + b',"w":' + hj(ONE["w"]) + b"}", D8), "duplicate key"),
    ("dup_metadata_key", st(b'{"__metadata__":{},"__metadata__":{},"w":' + hj(ONE["w"]) + b"}", D8),
     "duplicate key"),
    ("dup_key_in_metadata", st(b'{"__metadata__":{"a":"1","a":"2"},"w":' + hj(ONE["w"]) + b"}", D8),
     "duplicate key"),
    # a refused entry before a syntax error or a repeated key: the header is refused for the
    # text, as a whole parse finds it, though entries are checked as they are parsed (issue 27)
    ("bad_entry_then_syntax", st(b'{"a":' + hj(t("XX", [1], 0, 1)) + b',"b":' + hj(t("U8", [1], 1, 2)) + b",}",
                                 bytes(2)), "trailing comma before '}'"),
    ("bad_entry_then_dup_key", st(b'{"a":' + hj(t("XX", [1], 0, 1)) + b',"b":' + hj(t("U8", [1], 1, 2)) + b',"b":'
                                  + hj(t("U8", [1], 1, 2)) + b"}", bytes(2)), "duplicate key"),
    ("dup_key_in_entry",
     st(b'{"w":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}}', D8), "duplicate key"),
    # __metadata__
    ("metadata_nested", st(hj({"__metadata__": {"a": {"b": "c"}}, **ONE}), D8), "not a string"),
    ("metadata_number", st(hj({"__metadata__": {"a": 1}, **ONE}), D8), "not a string"),
    ("metadata_null", st(hj({"__metadata__": {"a": None}, **ONE}), D8), "not a string"),
    ("metadata_not_object", st(hj({"__metadata__": "pt", **ONE}), D8), "not an object of strings"),
    ("metadata_nul", st(hj({"__metadata__": {"a": "x\0y"}, **ONE}), D8), "NUL"),
    # tensor entries
    ("tensor_not_object", st(hj({"w": [1, 2]}), D8), "'w' at file offset 13 is an array, not an object"),
    ("unknown_tensor_key", st(hj({"w": {**ONE["w"], "offset": 0}}), D8), "unknown key 'offset'"),
    ("missing_dtype", st(hj({"w": {"shape": [2], "data_offsets": [0, 8]}}), D8), "no 'dtype' key"),
    ("missing_shape", st(hj({"w": {"dtype": "F32", "data_offsets": [0, 8]}}), D8), "no 'shape' key"),
    ("missing_offsets", st(hj({"w": {"dtype": "F32", "shape": [2]}}), D8), "no 'data_offsets' key"),
    ("unknown_dtype", st(hj({"w": t("F128", [2], 0, 8)}), D8), "unknown dtype 'F128'"),
    ("lowercase_dtype", st(hj({"w": t("f32", [2], 0, 8)}), D8), "unknown dtype 'f32'"),
    ("dtype_not_string", st(hj({"w": t(32, [2], 0, 8)}), D8), "dtype at file offset 22 is a number"),
    ("shape_negative", st(b'{"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}', D8), "is -2, not"),
    ("shape_float", st(b'{"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}', D8), "is 2.0, not"),
    ("shape_exponent", st(b'{"w":{"dtype":"F32","shape":[2e0],"data_offsets":[0,8]}}', D8), "is 2e0, not"),
    ("shape_2p64", st(b'{"w":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,8]}}', D8),
     "is 18446744073709551616, not"),
    ("shape_string", st(hj({"w": t("F32", ["2"], 0, 8)}), D8), "shape[0] at file offset 37 is a string"),
    ("shape_not_array", st(hj({"w": t("F32", 2, 0, 8)}), D8), "not an array"),
    ("shape_17_dims", st(hj({"w": t("F32", [1] * 16 + [2], 0, 8)}), D8), "17 dimensions"),
    ("shape_overflow", st(hj({"w": t("F32", [2, 1 << 63], 0, 8)}), D8), "overflows 64 bits"),
    ("bits_overflow", st(hj({"w": t("F32", [1 << 62], 0, 8)}), D8), "overflow a 64-bit byte count"),
    ("offsets_three", st(hj({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 8]}}), D8),
     "exactly 2 integers"),
    ("offsets_negative", st(b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}}', D8),
     "data_offsets[0] at file offset 56 is -8"),
    ("offsets_reversed", st(hj({"w": t("F32", [2], 8, 0)}), D8), "end before they begin"),
    ("nul_in_name", st(hj({"a\0b": ONE["w"]}), D8), "name at file offset 9 contains a NUL"),
    # offsets and sizes (§1.3 rules 6-8)
    ("gap_at_start", st(hj({"w": t("F32", [2], 4, 12)}), bytes(12)), "gap of 4 bytes after data offset 0"),
    ("gap_between", st(hj({"a": t("F32", [1], 0, 4), "b": t("F32", [1], 8, 12)}), bytes(12)),
     "gap of 4 bytes after data offset 4"),
    ("overlap", st(hj({"a": t("F32", [2], 0, 8), "b": t("F32", [2], 4, 12)}), bytes(12)), "overlap tensor 'a'"),
    ("size_mismatch", st(hj({"w": t("I32", [2, 2], 0, 4)}), bytes(4)), "hold 4 bytes but I32 [2, 2] needs 16"),
    ("trailing_bytes", st(hj(ONE), D8 + b"\0"), "1 trailing bytes"),
    ("f4_odd_count", st(hj({"w": t("F4", [3], 0, 2)}), bytes(2)), "do not fill a whole number of bytes"),
    ("f6_misaligned", st(hj({"w": t("F6_E2M3", [3], 0, 3)}), bytes(3)), "do not fill a whole number of bytes"),
]

# safetensors dtype strings and their bits per element (the Dtype enum of
# safetensors/src/tensor.rs)
ALL_DTYPES = [("BOOL", 8), ("F4", 4), ("F6_E2M3", 6), ("F6_E3M2", 6), ("U8", 8), ("I8", 8), ("F8_E5M2", 8),
              ("F8_E4M3", 8), ("F8_E8M0", 8), ("F8_E4M3FNUZ", 8), ("F8_E5M2FNUZ", 8), ("I16", 16), ("U16", 16),
              ("F16", 16), ("BF16", 16), ("I32", 32), ("U32", 32), ("F32", 32), ("C64", 64), ("F64", 64),
              ("I64", 64), ("U64", 64)]


def all_dtypes():
    """One [4]-element tensor of every dtype, packed back to back."""
    hdr, pos = {}, 0
    for name, bits in ALL_DTYPES:
        size = 4 * bits // 8
        hdr["t_" + name] = t(name, [4], pos, pos + size)
        pos += size
    return st(hj(hdr), bytes(pos))


def padded(header):
    return header + b" " * (-len(header) % 8)


# (file name, contents, stdout fragment)
LOAD = [
    ("ok_empty_header", st(b"{}"), "0 tensors"),
    ("ok_empty_header_padded", st(padded(b"{}")), "0 tensors"),
    ("ok_zero_size", st(hj({"z": t("F32", [2, 0], 0, 0), "w": t("F32", [2], 0, 8)}), D8), "2 tensors"),
    ("ok_two_zero_size_same_offset", st(hj({"y": t("F16", [0], 0, 0), "z": t("I8", [0, 5], 0, 0)})), "2 tensors"),
    ("ok_rank0", st(hj({"s": t("F32", [], 0, 4)}), bytes(4)), "[]"),
    ("ok_metadata_unknown_keys", st(hj({"__metadata__": {"format": "pt", "anything": "goes", "": ""}, **ONE}), D8),
     "metadata anything = goes"),
    ("ok_metadata_empty", st(hj({"__metadata__": {}, **ONE}), D8), "1 tensor"),
    ("ok_metadata_last", st(hj({**ONE, "__metadata__": {"format": "pt"}}), D8), "metadata format = pt"),
    ("ok_trailing_whitespace", st(hj(ONE) + b" \t\r\n  ", D8), "1 tensor"),
    ("ok_leading_whitespace", st(b"\n\t  " + hj(ONE), D8), "1 tensor"),
    ("ok_header_not_padded", st(hj({"abc": t("U8", [3], 0, 3)}), bytes(3)), "1 tensor"),
    ("ok_header_order_differs", st(hj({"b": t("F32", [1], 4, 8), "a": t("F32", [1], 0, 4)}), D8), "2 tensors"),
    ("ok_unicode_name", st(b'{"caf\\u00e9.\xe2\x82\xac":' + hj(ONE["w"]) + b"}", D8), "caf\u00e9.\u20ac"),
    ("ok_empty_name", st(hj({"": ONE["w"]}), D8), "1 tensor"),
    ("ok_f4_even", st(hj({"w": t("F4", [2, 3], 0, 3)}), bytes(3)), "F4"),
    ("ok_all_dtypes", all_dtypes(), "22 tensors"),
    ("ok_16_dims", st(hj({"w": t("U8", [1] * 15 + [3], 0, 3)}), bytes(3)), "1 tensor"),
    ("ok_huge_dim_times_zero", st(hj({"w": t("U8", [0, (1 << 64) - 1], 0, 0)})), "1 tensor"),
]


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if f.endswith(".safetensors"):
            os.remove(os.path.join(OUT, f))
    names = set()
    lines = ["# Generated by testdata/gen_bad_safetensors.py; format described there.",
             "# FILE\tEXIT\tFRAGMENT\t[SUBCOMMAND]"]
    for name, data, frag in FAIL:
        lines.append("%s.safetensors\t3\t%s" % (name, frag))
        names.add(name)
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
            f.write(data)
    for name, data, frag in LOAD:
        lines.append("%s.safetensors\t0\t%s" % (name, frag))
        names.add(name)
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
            f.write(data)
    assert len(names) == len(FAIL) + len(LOAD), "case names must be unique"
    with open(os.path.join(OUT, "CASES"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %d must-fail and %d must-load cases to %s" % (len(FAIL), len(LOAD), OUT))


if __name__ == "__main__":
    main()
