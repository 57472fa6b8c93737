"""The capture's trace: the followed tensors and the records written for them.

Above :mod:`..ops`, below the dispatch. :mod:`.tracks` (followed tensors),
:mod:`.store` (the record store, the one writer of records), :mod:`.engine` (reading
values, writing records), :mod:`.claims` (where random values land),
:mod:`.structured` (fills' actions), :mod:`.steps`, :mod:`.copies`,
:mod:`.coordinates`, :mod:`.concrete`, :mod:`.before` and :mod:`.folds`: the
components the dispatch calls, and :mod:`.frames` (the user's line).
"""
