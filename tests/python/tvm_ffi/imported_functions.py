"""A module only ``test_import_python_module_makes_the_module_s_functions_available`` imports,
so its function is registered only where that test's session imported it."""

import discovm


@discovm.register_global_func("tests.imported.worker_id", override=True)
def _worker_id() -> int:
    return discovm.current_worker_id()
