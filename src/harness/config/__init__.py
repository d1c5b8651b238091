"""Configuration: parsing and validation of harness.toml and of the values it shares with flags."""
