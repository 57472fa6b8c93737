"""The capture's session: one capture of a model's init code, from start to result.

The top wing. :mod:`.api` (:func:`capture_init`), :mod:`.standins` and
:mod:`.threads` (the stand-ins and the threads that touch them), :mod:`.created`
(tensors init code creates, replaces or removes), :mod:`.modulecalls` and
:mod:`.initcalls` (calls on the model), :mod:`.constructors` (constructor values) and
:mod:`.records` (what a capture returns).
"""
