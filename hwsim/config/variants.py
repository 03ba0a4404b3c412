"""A block that comes in kinds (arrivals, lengths, routing, the speculative method, the prefetch
predictor, the KV cache's storage): one class per kind, each holding only
the keys that act under it, so a key set under a kind it does nothing for is an unknown key at
load instead of a warning of the run (issue 42). `one_of` makes the discriminated union.

The YAML and the resolved config (`--json`) keep the one-bag form they had: `kind` (or the
family's tag key) may be left out where the family has a default kind, and a block is written with every kind's keys, the unused ones at their
defaults; such a key at its default is accepted back (it changes nothing), any other value of
it is an unknown key.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable, ClassVar, Literal, Union

from pydantic import BaseModel, Discriminator, Tag, model_serializer, model_validator

from hwsim.config.strict import Strict

TAG_MARK = "one-of:"    # starts a union member's tag ("one-of:kind=poisson") in a validation error's
                        # location: files.validate drops it from the key and names the kind


class Variant(Strict):
    """One kind of a block. `BAG`: every kind's keys of its family, in the order the resolved
    config writes them, with their defaults (set by one_of)."""
    BAG: ClassVar[dict[str, Any]] = {}

    @model_validator(mode="before")
    @classmethod
    def _drop_unused_defaults(cls, data):
        if not isinstance(data, dict):
            return data
        unused = [k for k, v in data.items()
                  if k not in cls.model_fields and k in cls.BAG and _same(v, cls.BAG[k])]
        return {k: v for k, v in data.items() if k not in unused} if unused else data

    def every_key(self) -> dict[str, Any]:
        """Every key of the family: this kind's values, the family's defaults for the keys it
        lacks (which cannot act in it), as a model of the whole family reads them."""
        return {**self.BAG, **{k: getattr(self, k) for k in type(self).model_fields}}

    @model_serializer(mode="wrap")
    def _whole_bag(self, handler, info):
        own = handler(self)
        return {k: own[k] if k in own else default.model_dump(mode=info.mode) if isinstance(default, BaseModel)
                else default for k, default in self.BAG.items()}


def _same(value, default) -> bool:
    if isinstance(default, BaseModel):          # a block: as the resolved config writes it
        return value == default or isinstance(value, dict) and value == default.model_dump()
    return type(value) is type(default) and value == default or (
        isinstance(value, (int, float)) and not isinstance(value, bool)
        and isinstance(default, (int, float)) and value == default)


class _BadKind(Strict):
    """Stands for a block whose kind is none of its family's: validating it says which are."""
    model_config = {**Strict.model_config, "extra": "ignore"}


def _set_bag(family, kinds, default, order: tuple[str, ...], tag: str | None) -> dict[str, Any]:
    bag: dict[str, Any] = {}
    for key in order:
        owners = [k for k in kinds if key in k.model_fields]
        assert owners, f"{family.__name__}: no kind has {key}"
        field = (default if default and key in default.model_fields else owners[0]).model_fields[key]
        bag[key] = None if key == tag and not default else field.get_default(call_default_factory=True)
    assert set(bag) == {f for k in kinds for f in k.model_fields}, f"{family.__name__}: order misses a key"
    family.BAG = bag
    return bag


def one_of_modes(modes: dict[str, type[Variant]], mode_of: Callable[[Any], str], order: tuple[str, ...],
                 bad: tuple[str, tuple[str, ...]] | None = None) -> Any:
    """The union of `modes` (label -> Variant class), told apart by `mode_of(value)`, a label
    read from other keys (the run mode, from the arrivals' kind; a KV cache's storage, from its
    widths and element) rather than a tag key of its own. `bad`: (key, its valid values) where
    `mode_of` answers "?" for a value of that key none of the modes has."""
    kinds = list(modes.values())
    family = next(c for c in kinds[0].__mro__ if Variant in c.__bases__)
    _set_bag(family, kinds, None, order, None)
    members = [Annotated[k, Tag(f"{TAG_MARK}{label}")] for label, k in modes.items()]
    if bad is not None:
        key, values = bad
        kind = type(f"{family.__name__}Kind", (_BadKind,), {"__annotations__": {key: Literal[values]}})
        members.append(Annotated[kind, Tag(f"{TAG_MARK}?")])

    def pick(value):
        return f"{TAG_MARK}{mode_of(value)}"

    return Annotated[Union[tuple(members)], Discriminator(pick)]


def one_of(*kinds: type[Variant], default: type[Variant] | None, order: tuple[str, ...], tag: str = "kind") -> Any:
    """The union of `kinds` (Variant classes told apart by their `tag` Literal), `default` the
    kind of a block that leaves `tag` out (None: it is required); `order`: the family's keys as
    the resolved config writes them."""
    family = kinds[0].__mro__[1]
    names = {k.model_fields[tag].default: k for k in kinds}
    bag = _set_bag(family, kinds, default, order, tag)
    bad = type(f"{family.__name__}Kind", (_BadKind,), {"__annotations__": {tag: Literal[tuple(names)]}})

    def pick(value):
        kind = value.get(tag, bag[tag]) if isinstance(value, dict) else getattr(value, tag, bag[tag])
        return f"{TAG_MARK}{tag}={kind}" if isinstance(kind, str) and kind in names else f"{TAG_MARK}?"

    members = [Annotated[k, Tag(f"{TAG_MARK}{tag}={name}")] for name, k in names.items()]
    return Annotated[Union[tuple(members + [Annotated[bad, Tag(f"{TAG_MARK}?")]])], Discriminator(pick)]
