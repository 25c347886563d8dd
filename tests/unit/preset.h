/* preset.h - the unit tests' model graphs: a preset built at a micro-batch
 * shape, with the last error in `err` (which the tests also use). */
#ifndef MERAK_TEST_PRESET_H
#define MERAK_TEST_PRESET_H

#include "merak/merak.h"

static char err[512];

static merak_graph *build(const char *preset, int B, int T)
{
    merak_model_config c;
    if (merak_model_preset(preset, &c) < 0)
        return NULL;
    return merak_model_build(&c, B, T, err, sizeof err);
}

#endif
