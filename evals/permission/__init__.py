"""The golden permission set (TOML fixtures), shipped as package data."""
