/* Prints the name of the float64 reference's block kernel that verify runs on this CPU
 * (verify/math/ref_kernel.h: portable, avx2 or avx512; TPS_VREF_KERNEL forces a narrower one),
 * for make bench-verify's results (tests/bench/bench.py), which depend on it.
 *   vref_kernel        prints e.g. "avx512"
 * Exit status 0. */
#include <stdio.h>

#include "verify/math/ref_kernel.h"

int main(void)
{
    printf("%s\n", tps_vref_kernel_name());
    return 0;
}
