/*
 * fuzz_device.c - libFuzzer target: any bytes as a device profile file
 * (merak-plan --device FILE.json, MERAK_DEVICES): one profile at the top
 * level or a "devices" table of one.  A profile that loads must come back
 * bit for bit from the file merak_device_write makes of it (what
 * merak-plan --calibrate writes, the planner reads).
 */
#include "memfile.h" /* first: it asks for _GNU_SOURCE */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/device.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    merak_device a, b;
    if (merak_device_load(fuzz_file(data, size), &a, err, sizeof err) < 0)
        return 0;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f || merak_device_write(&a, f) < 0 || fclose(f) != 0)
        abort();
    if (merak_device_load(fuzz_file((const uint8_t *)text, len), &b, err, sizeof err) < 0) {
        fprintf(stderr, "what merak_device_write wrote does not load: %s\n%s", err, text);
        abort();
    }
    if (memcmp(&a, &b, sizeof a) != 0) {
        fprintf(stderr, "the profile changed on the way through the file:\n%s", text);
        abort();
    }
    free(text);
    return 0;
}
