"""Hugging Face ``datasets`` folders among the inputs.

``Dataset.save_to_disk(folder)`` writes the dataset's rows as Arrow IPC streams
(``data-00000-of-00002.arrow``, ...: io/arrow.py reads them) beside two metadata files:
``state.json``, whose ``_data_files`` lists the data files in the dataset's order, and
``dataset_info.json`` (its features, description, ...). Such a folder, local or at a URL, given
as an input or met inside an input directory, is read as its dataset: its data files in
state.json's order; its metadata files are neither documents nor entries passed over.
Anything else in it is passed over and named (not one of the dataset's files).

``DatasetDict.save_to_disk(folder)`` writes ``dataset_dict.json`` (its splits) and a folder of
the kind above per split; it is refused (a run deduplicates one dataset: give one split's
folder, or several).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Protocol, TypeVar

from ..errors import InputError
from . import storage
from .source import listed
from .storage import Remote

STATE = "state.json"
INFO = "dataset_info.json"
DICT = "dataset_dict.json"
STRAY = f"not one of the files of the dataset saved here ({STATE} lists its data files)"


class Named(Protocol):
    @property
    def name(self) -> str: ...


Entry = TypeVar("Entry", bound=Named)


@dataclass(frozen=True)
class DatasetFolder:
    """A ``save_to_disk`` folder: data_files, the names of its data files in the dataset's
    order; metadata, the names of its metadata files."""

    data_files: tuple[str, ...]
    metadata: frozenset[str]

    def entries(self, entries: list[Entry]) -> list[Entry]:
        """The folder's entries (anything with a ``name``, as os.scandir gives them) to walk:
        its data files first, in the dataset's order, then the entries that are not its own
        (passed_over names them); its metadata files not at all."""
        by_name = {entry.name: entry for entry in entries}
        own = set(self.data_files) | self.metadata
        data = [by_name[name] for name in self.data_files if name in by_name]
        return data + [entry for entry in entries if entry.name not in own]

    def passed_over(self, name: str) -> Optional[str]:
        """Why the folder's entry ``name`` is passed over, or None for one of its data files
        (read as the input rules read any file)."""
        return None if name in self.data_files else STRAY


def dataset_folder_files(directory: Path, shown: str) -> Optional[DatasetFolder]:
    """The dataset saved in the local ``directory`` (shown as ``shown`` in messages) by
    ``datasets``' save_to_disk, or None where it holds no such dataset (dataset_in)."""
    if not ((directory / STATE).is_file() or (directory / DICT).is_file()):
        return None  # (most folders: two lookups, no listing)
    try:
        with os.scandir(directory) as scan:
            files = {entry.name for entry in scan if entry.is_file()}
    except OSError:
        return None  # (the walk reports a folder it cannot read)
    return dataset_in(files, lambda name: (directory / name).read_bytes(), shown)


def dataset_in(files: set[str], read: Callable[[str], bytes], shown: str) -> Optional[DatasetFolder]:
    """The dataset saved in a folder holding the files ``files`` (names; read(name) gives one's
    bytes; ``shown``: the folder in messages), or None where it holds no state.json beside
    dataset_info.json. InputError for a DatasetDict's folder, a state.json that cannot be
    read or lists no data file, or a data file it lists that is not a file of the folder."""
    if DICT in files and STATE not in files:
        raise InputError(f"{shown}: a Hugging Face DatasetDict folder ({dataset_splits(read)}); give one "
                         "split's folder (or several) to deduplicate")
    if not (STATE in files and INFO in files):
        return None
    state = f"{shown}/{STATE}"
    try:
        listing = json.loads(read(STATE).decode("utf-8"))["_data_files"]
        names = [entry["filename"] for entry in listing]
    except (OSError, UnicodeError, ValueError, KeyError, TypeError) as error:
        raise InputError(f"{state}: not a readable datasets state file ({type(error).__name__}: {error}); it "
                         "should list the dataset's data files under \"_data_files\"") from None
    if not names:
        raise InputError(f"{state}: lists no data file under \"_data_files\"")
    for name in names:
        if not isinstance(name, str) or "/" in name or "\\" in name or name in ("", ".", ".."):
            raise InputError(f"{state}: lists {name!r} as a data file; expected a file name in {shown}")
        if name not in files:
            raise InputError(f"{shown}/{name}: listed in {STATE}, but there is no such file; the saved dataset "
                             "is incomplete")
    return DatasetFolder(tuple(names), frozenset({STATE, INFO}))


def dataset_splits(read: Callable[[str], bytes]) -> str:
    """The splits a DatasetDict folder's dataset_dict.json names, for a message."""
    try:
        splits = json.loads(read(DICT).decode("utf-8"))["splits"]
        return f"splits: {listed([str(split) for split in splits])}"
    except (OSError, UnicodeError, ValueError, KeyError, TypeError):
        return f"it holds {DICT}"


def remote_dataset_order(remote: Remote, relatives: list[str], shown: Callable[[Remote], str]
                         ) -> tuple[list[str], dict[str, str]]:
    """The objects below the folder ``remote`` (``relatives``: "/"-separated keys below it, in
    walk order) as a walk reads them, with each save_to_disk folder among them read as its
    dataset: its data files in its order where its objects were, its metadata left out; and
    the objects inside such folders that are not the dataset's (relative -> why passed over).
    shown: a URL as messages show it."""
    by_folder: dict[str, set[str]] = {}
    for relative in relatives:
        folder, _, name = relative.rpartition("/")
        by_folder.setdefault(folder, set()).add(name)
    datasets: dict[str, DatasetFolder] = {}
    for folder, files in by_folder.items():
        place = remote.child(folder) if folder else remote
        found = dataset_in(files, object_reader(place), shown(place))
        if found is not None:
            datasets[folder] = found
    if not datasets:
        return relatives, {}
    ordered: list[str] = []
    strays: dict[str, str] = {}
    placed: set[str] = set()
    for relative in relatives:
        holder = next((f for f in datasets if not f or relative.startswith(f + "/")), None)
        if holder is None:
            ordered.append(relative)
            continue
        folder = holder
        dataset, name = datasets[folder], relative[len(folder) + 1 if folder else 0:]
        if name in dataset.metadata:
            continue
        if name not in dataset.data_files:
            ordered.append(relative)
            strays[relative] = STRAY
        elif folder not in placed:  # the dataset's data files, in its order, where its first one was
            placed.add(folder)
            ordered.extend(f"{folder}/{data}" if folder else data for data in dataset.data_files)
    return ordered, strays


def object_reader(folder: Remote) -> Callable[[str], bytes]:
    """read(name): the bytes of the object ``name`` in ``folder``."""
    return lambda name: storage.read_bytes(folder.child(name))
