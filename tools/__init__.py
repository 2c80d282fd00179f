"""Tools that are not benchmarks and not tests: the protocol fuzzer (`make fuzz`)."""
