/* The free-page-reporting probe (lib/base/hostmem.c) against sysfs trees built here by hand
 * from the virtio specification: the balloon is device ID 5, free page reporting is feature
 * bit 5, and sysfs writes a device's features as one '0'/'1' character per bit, bit 0 first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/base/hostmem.h"
#include "tps_test.h"

static char root[256];

static void put(const char *rel, const char *text)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* A fresh tree with bus/virtio/devices/ and no devices. */
static void fresh_tree(void)
{
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/bus/virtio/devices'", root, root);
    CHECK(system(cmd) == 0);
}

static void add_device(const char *name, const char *id, const char *features)
{
    char rel[600];
    snprintf(rel, sizeof rel, "%s/bus/virtio/devices/%s", root, name);
    mkdir(rel, 0755);
    snprintf(rel, sizeof rel, "bus/virtio/devices/%s/device", name);
    put(rel, id);
    snprintf(rel, sizeof rel, "bus/virtio/devices/%s/features", name);
    put(rel, features);
}

/* The features line of this machine's balloon, which reports free pages: bits 1, 2, 5, 7. */
static const char *REPORTING = "0110010100000000000000000000000010000000000000000000000000000000\n";
static const char *NOT_REPORTING = "0110000100000000000000000000000010000000000000000000000000000000\n";

TEST(no_virtio_bus_means_no_reporting)
{
    char missing[300];
    snprintf(missing, sizeof missing, "%s/nonexistent", root);
    CHECK(!tps_host_reclaims_free_pages(missing));
}

TEST(balloon_with_reporting_is_found_among_other_devices)
{
    fresh_tree();
    add_device("virtio0", "0x0002\n", REPORTING); /* a block device with bit 5 set: not it */
    CHECK(!tps_host_reclaims_free_pages(root));
    add_device("virtio1", "0x0005\n", REPORTING);
    CHECK(tps_host_reclaims_free_pages(root));
}

TEST(balloon_without_reporting_is_not_enough)
{
    fresh_tree();
    add_device("virtio0", "0x0005\n", NOT_REPORTING);
    CHECK(!tps_host_reclaims_free_pages(root));
}

TEST(short_or_missing_features_are_not_reporting)
{
    fresh_tree();
    add_device("virtio0", "0x0005\n", "01100\n"); /* bit 5 is the newline: absent */
    CHECK(!tps_host_reclaims_free_pages(root));
    fresh_tree();
    char rel[512];
    snprintf(rel, sizeof rel, "%s/bus/virtio/devices/virtio0", root);
    mkdir(rel, 0755);
    put("bus/virtio/devices/virtio0/device", "0x0005\n"); /* no features file */
    CHECK(!tps_host_reclaims_free_pages(root));
}

TEST(write_chunk_is_one_of_the_two_sizes)
{
    size_t c = tps_write_chunk();
    CHECK(c == ((size_t)64 << 10) || c == ((size_t)1 << 30));
    CHECK(c == (tps_host_reclaims_free_pages("/sys") ? ((size_t)64 << 10) : ((size_t)1 << 30)));
}

int main(void)
{
    snprintf(root, sizeof root, "%s/tps-hostmem.%ld", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid());
    RUN(no_virtio_bus_means_no_reporting);
    RUN(balloon_with_reporting_is_found_among_other_devices);
    RUN(balloon_without_reporting_is_not_enough);
    RUN(short_or_missing_features_are_not_reporting);
    RUN(write_chunk_is_one_of_the_two_sizes);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) printf("# could not remove %s\n", root);
    return tps_test_done();
}
