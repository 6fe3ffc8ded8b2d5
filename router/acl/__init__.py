"""ACL users as Redis 7.0.15 defines them, for a pub/sub node (issue 14):
:mod:`router.acl.user` (a user, its rules, their description),
:mod:`router.acl.registry` (the users, authentication, permission checks,
ACL LOG). The ACL command is :mod:`router.commands.acl_cmd`."""

from router.acl.registry import Acl, LogEntry
from router.acl.user import AclError, User

__all__ = ["Acl", "AclError", "LogEntry", "User"]
