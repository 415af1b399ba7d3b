"""The protocol model (model/protocol.pml) under spin, and the mirrors of the Lua scripts it models."""
