import sys

from .cli import main

if __name__ == "__main__":  # not when a spawned process (multiprocessing) imports the parent's main module
    sys.exit(main())
