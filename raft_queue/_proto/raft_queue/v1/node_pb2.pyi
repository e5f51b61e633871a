from raft_queue._proto.raft_queue.v1 import admin_pb2 as _admin_pb2
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor
