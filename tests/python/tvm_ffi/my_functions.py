"""The worker functions of the README's example of worker processes."""

import discovm


@discovm.register_global_func("my.add_one", override=True)
def _add_one(x: int) -> int:
    return x + 1
