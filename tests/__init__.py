"""The test suite (a package, so that its helpers are ``tests.support``; the test folders are not)."""
