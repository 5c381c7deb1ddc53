#!/usr/bin/env python3
"""The image's ENTRYPOINT: the pre-flight, then ``exec vllm serve ARGV`` (argv unchanged).

Lives in the payload directory's geometry/preflight/, next to the record of what the
build checked; GLM53_PREFLIGHT=enforce (default) | warn | off.
"""

import os
import sys

PAYLOAD_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The payload is copied into the image, not installed there: geometry/ is found in its directory.
sys.path.insert(0, PAYLOAD_DIR)

from geometry.preflight.run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], PAYLOAD_DIR))
