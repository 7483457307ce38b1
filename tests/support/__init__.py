"""Helpers shared by the tests: peers, span builders, campaign workers, paths."""
