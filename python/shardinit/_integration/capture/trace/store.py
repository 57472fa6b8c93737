"""The record store of a capture: the followed tensors by storage (:mod:`.tracks`), the
boxes operations write, the operations recorded on each, and the first refusal. The
store alone writes a track's operations (:meth:`RecordStore.append`,
:meth:`RecordStore.add`, :meth:`RecordStore.hold`, :meth:`RecordStore.forget`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from ...._program.actions import Action, CapturedOp, Opaque, Selected, TrackAction
from ...._program.cannot import Cannot
from ...._program.regions import Box, view_region, whole
from ...._program.selection import positions
from ...._torch_compat import torch_function_disabled, tree_leaves
from ....errors import UnsupportedInitOpError
from .frames import user_frame
from .refusals import HELP, refusal
from .tracks import Track, storage_id

__all__ = ["RecordStore", "Unknown"]


@dataclass(frozen=True)
class Unknown:
    """The mark of a real tensor whose values the capture does not know: ``why`` names
    the op that made them and its line (:meth:`RecordStore.mark_unknown`); ``random``:
    they were computed from a draw of torch's global generator."""

    why: str
    random: bool = False


class RecordStore:
    """The followed tensors and what was written to them.

    Attributes:
        error: the first refusal (kept: init code may swallow the exception, and the
            capture is unusable all the same).
    """

    def __init__(self, tracks: Sequence[Track], aliases: Mapping[int, Track]) -> None:
        self.by_storage: dict[int, Track] = dict(aliases)
        for track in tracks:
            self.follow(track)
        self.error: UnsupportedInitOpError | None = None
        # Storages of real tensors computed under the capture from values it does not
        # know (random, opaque, a parameter's): id -> (the storage, kept alive so that
        # its id is not reused, and why). Their bytes are torch's, never a table.
        self.unknown: dict[int, tuple[Any, Unknown]] = {}
        # The signal whose Python handler runs now, if one does (:mod:`..session.signals`).
        self.in_signal: str | None = None
        # The call site of the torch call the dispatch routes now (:meth:`where`): False
        # outside one, None inside one until asked.
        self.call_site: str | bool | None = False

    def where(self) -> str:
        """``file:line in function`` of the user's code that made the torch call routed
        now (:func:`.frames.user_frame`), walked for once per call: a call's records,
        temporaries and reads each name it (a row copy asks eight times). Outside a
        routed call (the dispatch sets :attr:`call_site`), the stack is walked."""
        site = self.call_site
        if isinstance(site, str):
            return site
        found = user_frame()
        if site is None:
            self.call_site = found
        return found

    def refuse_in_signal(self, op: str, operands: Any) -> None:
        """Inside a signal handler (:attr:`in_signal`), a call ``op`` on a followed tensor
        is refused: its order against init code's writes is chance."""
        if self.in_signal is None:
            return
        followed = self.followed(operands)
        if followed:
            raise self.fail(
                followed[0], op,
                f"it runs in the Python handler of {self.in_signal}, between two steps of "
                "init code or of the capture itself: its order against init code's writes "
                "is chance, and cannot be replayed (handle the signal outside "
                "materialize, or set a flag there and act on it after)",
            )  # fmt: skip

    def follow(self, track: Track) -> Track:
        self.by_storage[id(track.storage)] = track
        return track

    def lookup(self, value: Any) -> Track | None:
        """The track of the tensor whose storage ``value`` views, if followed."""
        if not isinstance(value, torch.Tensor):
            return None
        sid = storage_id(value)
        return None if sid is None else self.by_storage.get(sid)

    def mark_unknown(self, value: torch.Tensor, why: str, random: bool = False) -> None:
        """``value``'s storage holds values the capture does not know (``why``: the op
        that made them and its line; ``random``: computed from a draw of torch's
        generator, which a refusal says): reaching a parameter or buffer, they are refused
        (:meth:`unknown_of`). A followed tensor's values are its track's fold; marked,
        its real values are never taken as a table (:meth:`.engine.Engine.fold`)."""
        sid = storage_id(value)
        if sid is None or sid in self.unknown:
            return
        with torch_function_disabled():
            self.unknown[sid] = (value.untyped_storage(), Unknown(why, random))

    def unknown_of(self, value: Any) -> Unknown | None:
        """The mark of the real tensor ``value`` when its values are unknown to the
        capture, or None (a tensor made before it, or computed from known values only)."""
        if not self.unknown or not isinstance(value, torch.Tensor):
            return None
        sid = storage_id(value)
        kept = None if sid is None or sid in self.by_storage else self.unknown.get(sid)
        return None if kept is None else kept[1]

    def marked(self, track: Track) -> bool:
        """Whether the real values of followed ``track`` were computed, at some point,
        from values the capture does not know (:meth:`mark_unknown`)."""
        return id(track.storage) in self.unknown

    def followed(self, tree: Any) -> list[Track]:
        """The tracks of the tensors in ``tree`` (nested arguments), each once."""
        found: list[Track] = []
        for leaf in tree_leaves(tree):
            track = self.lookup(leaf)
            if track is not None and all(track is not seen for seen in found):
                found.append(track)
        return found

    def params_in(self, tree: Any) -> list[Track]:
        return [track for track in self.followed(tree) if track.kind == "param"]

    def new_temp(self, name: str, result: torch.Tensor) -> Track:
        with torch_function_disabled():  # its own shape (no device mode's Python call)
            shape = tuple(result.shape)
        label = f"temporary {name}{shape} at {self.where()}"
        return self.follow(Track("temp", result, label))

    def fail(self, track: Track | str, op: str, why: str) -> UnsupportedInitOpError:
        """The refusal of ``op`` on ``track`` (or a tensor so described; kept as
        :attr:`error` if the first)."""
        label = track if isinstance(track, str) else track.label
        error = refusal(label, op, why, HELP)
        if self.error is None:
            self.error = error
        return error

    @contextmanager
    def refusing(self, track: Track, op: str) -> Iterator[None]:
        """The capture's edge: a :class:`~shardinit._program.cannot.Cannot` raised inside
        becomes the refusal of ``op`` on ``track`` (:meth:`fail`)."""
        try:
            yield
        except Cannot as cannot:
            raise self.fail(track, op, cannot.reason) from None

    def region(
        self, track: Track, view: torch.Tensor, op: str
    ) -> tuple[Box, Sequence[int | None] | None] | None:
        """The box of ``track`` that ``view`` covers, with the base dim each view dim
        runs along (None for all of them when the region is no box: only a temporary
        may be written so, and becomes opaque there); None when ``view`` is empty.

        Raises:
            UnsupportedInitOpError: a parameter's region is not a box.
        """
        if view is track.base:  # the whole tensor (most init code writes)
            return track.whole()
        try:
            region = view_region(view, track.base)
        except Cannot as cannot:
            if track.kind != "param":
                return (whole(track.shape), None)
            raise self.fail(track, op, f"the region written is not a box ({cannot})") from None
        return region

    def append(
        self, track: Track, view: torch.Tensor, action: TrackAction, op: str
    ) -> CapturedOp | None:
        """Appends ``action`` on the box ``view`` covers (for a temporary whose region is
        no box, the whole temporary becomes opaque); returns the recorded op (None: the
        view is empty, nothing is written). A parameter's view that is no box but a
        strided slice or a 1-D strided view is ``action`` where its elements lie, on the
        box around them (:meth:`_selected`): one rule for every write through one."""
        region: tuple[Box, Sequence[int | None] | None] | None
        if track.kind == "param" and isinstance(action, Action) and view is not track.base:
            try:
                region = view_region(view, track.base)
            except Cannot as cannot:  # a strided slice, a diagonal: where it lies
                box, action = self._selected(track, view, action, op, cannot)
                region = box, ()
        else:
            region = self.region(track, view, op)
        if region is None:
            return None
        box, axes = region
        if axes is None:
            action = Opaque(f"{op} wrote a region that is not a box")
        recorded = CapturedOp(box, action, op, self.where())
        track.ops.append(recorded)
        return recorded

    def _selected(
        self, track: Track, view: torch.Tensor, action: Action, op: str, cannot: Cannot
    ) -> tuple[Box, Action]:
        """``action`` through ``view`` of the parameter ``track``, a view that is no box:
        on the box around its elements, where they lie (:mod:`...._program.selection`).

        Raises:
            UnsupportedInitOpError: the view's elements cannot be named so (an expanded
                view, overlapping windows), with why it is no box.
        """
        try:
            with torch_function_disabled():  # the tensors' own layouts
                box, cond = positions(view, track.base)
        except Cannot as no_grid:
            why = f"the region written is not a box ({cannot}) and {no_grid}"
            raise self.fail(track, op, why) from None
        return box, Selected(cond, action)

    def add(self, track: Track, recorded: CapturedOp) -> None:
        """Appends ``recorded`` (its box of ``track`` known: a write or a copied op)."""
        track.ops.append(recorded)

    def hold(self, temp: Track, action: TrackAction, op: str) -> None:
        """Records that ``op`` made the new temporary ``temp``: ``action`` on all of it."""
        temp.ops.append(CapturedOp(whole(temp.shape), action, op, self.where()))

    def forget(self, track: Track) -> None:
        """Drops every operation recorded on ``track`` (its values are gone)."""
        track.ops.clear()
