/* names.c - see names.h. */
#include <stdio.h>
#include <string.h>

#include "names.h"

int merak_name_find(const char *const *names, int n, const char *name)
{
    for (int i = 0; name && i < n; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

const char *merak_names_join(const char *const *names, int n, char *buf, size_t len)
{
    size_t used = 0;
    if (len)
        buf[0] = 0;
    for (int i = 0; i < n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s",
                                 i == 0 ? "" : i == n - 1 ? " or " : ", ", names[i]);
    return buf;
}
