"""handoffscope's tests, laid out as the packages they test."""
