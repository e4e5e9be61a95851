"""The gateway's LTI 1.3 domain: a school's LMS launches Lectern (docs/lti.md)."""
