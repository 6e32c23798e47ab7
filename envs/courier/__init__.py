"""The courier family: a parcel's password on one of the first stops, needed after many stops of filler."""

from rl_compaction_envs.courier.family import CourierFamily

__all__ = ["CourierFamily"]
