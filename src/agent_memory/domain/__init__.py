"""Pure domain: records and rules. No I/O, no clock, no imports of other layers."""
