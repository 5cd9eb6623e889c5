"""``python -m ha.demo worker URL PATH IDENTITY JOURNAL``: one contender process of the demo."""

import sys

from .contenders import worker_main

if __name__ == "__main__":
    worker_main(sys.argv[1:])
