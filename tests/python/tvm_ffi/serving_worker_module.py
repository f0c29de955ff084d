"""A worker program written for the package before entrypoints were imported: it registers its
function, then serves the session itself, unguarded, as its import runs."""

import discovm
import discovm.worker


@discovm.register_global_func("tests.serving.answer", override=True)
def _answer() -> int:
    return 42


discovm.worker.main()
