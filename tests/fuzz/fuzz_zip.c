/* The ZIP reader (formats/zip.h) on the input as a whole archive: open (both CRC policies),
 * then for the first entries a bounded whole read, a read at an offset inside the entry
 * (restarting the inflater), and a CRC check. */
#include "fuzz.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "formats/zip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_memfile(data, size);
    if (!path) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    for (unsigned flags = 0; flags <= TPS_ZIP_CRC_ZERO_IS_ABSENT; flags++) {
        tps_zip *z = NULL;
        tps_error err;
        tps_error_clear(&err);
        if (tps_zip_open(fd, "fuzz.zip", size, flags, &z, &err) != TPS_OK) {
            tps_zip_free(z);
            continue;
        }
        size_t n = tps_zip_count(z);
        for (size_t i = 0; i < n && i < 8; i++) {
            const tps_zip_entry *e = tps_zip_entry_at(z, i);
            tps_zip_find(z, e->name);
            char *all = NULL;
            size_t len = 0;
            tps_error_clear(&err);
            tps_zip_read_all(z, e, 1u << 20, &all, &len, &err);
            free(all);
            if (e->usize > 1) {
                unsigned char buf[16];
                uint64_t off = e->usize / 2;
                size_t want = e->usize - off < sizeof buf ? (size_t)(e->usize - off) : sizeof buf;
                tps_error_clear(&err);
                tps_zip_read(z, e, off, buf, want, &err);
                tps_error_clear(&err);
                tps_zip_read(z, e, 0, buf, 1, &err);
            }
            tps_error_clear(&err);
            if (e->usize <= (1u << 22)) tps_zip_verify(z, e, &err);
        }
        tps_zip_crc_absent(z);
        tps_zip_free(z);
    }
    close(fd);
    return 0;
}
