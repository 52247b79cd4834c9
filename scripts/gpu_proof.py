#!/usr/bin/env python3
"""`gpu_proof.py run|check`: the GPU proof's command line; the proof itself is the package beside this file,
scripts/gpu_proof/ (its __init__.py says what run and check do; the package is what `import gpu_proof` finds)."""
import sys

from gpu_proof.cli import main

sys.exit(main())
