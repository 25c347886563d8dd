#!/usr/bin/env python3
"""wheel-headers.py WHEEL DIR - unpacks the include/ directory of a Python
wheel (a zip) into DIR/include, checking that it holds cudnn_frontend.h.

scripts/install-deps.sh and scripts/gpu-env.sh bring cudnn-frontend's
headers this way from its PyPI wheel (nvidia-cudnn-frontend), whose
include/ sits at the top of the archive; its Python module is left out.
"""
import os
import sys
import zipfile


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: wheel-headers.py WHEEL DIR\n")
        return 2
    wheel, out = sys.argv[1], sys.argv[2]
    n = 0
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            # only include/..., never an absolute path or one climbing out
            if not name.startswith("include/") or name.endswith("/") or ".." in name.split("/"):
                continue
            z.extract(name, out)
            n += 1
    if not os.path.isfile(os.path.join(out, "include", "cudnn_frontend.h")):
        sys.stderr.write("wheel-headers.py: %s has no include/cudnn_frontend.h\n" % wheel)
        return 1
    print("wheel-headers.py: %d headers into %s/include" % (n, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
