/*
 * fuzz_spank_args.c - libFuzzer target: the SPANK plugin's option values
 * and plugstack.conf arguments.  The input is NUL-separated items; an
 * item's first byte picks an option (below 0x80: option (byte % 11), the
 * rest its value, or a flag without one when empty) or a plugstack
 * argument (0x80 and above: the rest).  Then the layout is resolved for
 * a task count from the input's last two bytes.  Every refusal says why;
 * an accepted layout has dp * tp * pp tasks and respects the site's tp
 * limit.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spank_args.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512], item[2048];
    merak_spank_opts o;
    merak_spank_site s;
    merak_spank_opts_init(&o);
    merak_spank_site_init(&s);
    size_t i = 0;
    while (i < size) {
        size_t n = 0;
        while (i < size && data[i] && n + 1 < sizeof item)
            item[n++] = (char)data[i++];
        item[n] = 0;
        i++;
        if (!n)
            continue;
        err[0] = 0;
        int rc = (unsigned char)item[0] < 0x80
                     ? merak_spank_set_option(&o, item[0] % 11, n > 1 ? item + 1 : NULL, err, sizeof err)
                     : merak_spank_site_arg(&s, item + 1, err, sizeof err);
        if (rc < 0 && !err[0])
            abort();   /* a refusal says why */
    }
    int ntasks = size >= 2 ? (data[size - 2] << 8 | data[size - 1]) : 1, dp, tp, pp;
    err[0] = 0;
    if (merak_spank_resolve(&o, &s, ntasks, &dp, &tp, &pp, err, sizeof err) < 0) {
        if (!err[0])
            abort();
    } else if ((long)dp * tp * pp != ntasks || dp < 1 || tp < 1 || pp < 1 || (s.max_tp && tp > s.max_tp)) {
        abort();   /* accepted, so it must be a layout of these tasks */
    }
    return 0;
}
