import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_SYSTEM: _ClassVar[Role]
    ROLE_USER: _ClassVar[Role]
    ROLE_ASSISTANT: _ClassVar[Role]
    ROLE_TOOL: _ClassVar[Role]
    ROLE_DEVELOPER: _ClassVar[Role]

class ResultStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESULT_STATUS_UNSPECIFIED: _ClassVar[ResultStatus]
    RESULT_STATUS_OK: _ClassVar[ResultStatus]
    RESULT_STATUS_ERROR: _ClassVar[ResultStatus]

class ArgumentStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ARGUMENT_STATUS_UNSPECIFIED: _ClassVar[ArgumentStatus]
    ARGUMENT_STATUS_VALID: _ClassVar[ArgumentStatus]
    ARGUMENT_STATUS_REPAIRED: _ClassVar[ArgumentStatus]
    ARGUMENT_STATUS_TRUNCATED: _ClassVar[ArgumentStatus]
    ARGUMENT_STATUS_INVALID: _ClassVar[ArgumentStatus]

class FileOperation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILE_OPERATION_UNSPECIFIED: _ClassVar[FileOperation]
    FILE_OPERATION_NONE: _ClassVar[FileOperation]
    FILE_OPERATION_READ: _ClassVar[FileOperation]
    FILE_OPERATION_WRITE: _ClassVar[FileOperation]
    FILE_OPERATION_EDIT: _ClassVar[FileOperation]

class PromptView(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROMPT_VIEW_UNSPECIFIED: _ClassVar[PromptView]
    PROMPT_VIEW_FULL: _ClassVar[PromptView]
    PROMPT_VIEW_JSON: _ClassVar[PromptView]
    PROMPT_VIEW_TYPED: _ClassVar[PromptView]

class EditStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EDIT_STATUS_UNSPECIFIED: _ClassVar[EditStatus]
    EDIT_STATUS_APPLIED: _ClassVar[EditStatus]
    EDIT_STATUS_OUT_OF_RANGE: _ClassVar[EditStatus]
    EDIT_STATUS_OVERLAP: _ClassVar[EditStatus]
    EDIT_STATUS_MISMATCH: _ClassVar[EditStatus]
ROLE_UNSPECIFIED: Role
ROLE_SYSTEM: Role
ROLE_USER: Role
ROLE_ASSISTANT: Role
ROLE_TOOL: Role
ROLE_DEVELOPER: Role
RESULT_STATUS_UNSPECIFIED: ResultStatus
RESULT_STATUS_OK: ResultStatus
RESULT_STATUS_ERROR: ResultStatus
ARGUMENT_STATUS_UNSPECIFIED: ArgumentStatus
ARGUMENT_STATUS_VALID: ArgumentStatus
ARGUMENT_STATUS_REPAIRED: ArgumentStatus
ARGUMENT_STATUS_TRUNCATED: ArgumentStatus
ARGUMENT_STATUS_INVALID: ArgumentStatus
FILE_OPERATION_UNSPECIFIED: FileOperation
FILE_OPERATION_NONE: FileOperation
FILE_OPERATION_READ: FileOperation
FILE_OPERATION_WRITE: FileOperation
FILE_OPERATION_EDIT: FileOperation
PROMPT_VIEW_UNSPECIFIED: PromptView
PROMPT_VIEW_FULL: PromptView
PROMPT_VIEW_JSON: PromptView
PROMPT_VIEW_TYPED: PromptView
EDIT_STATUS_UNSPECIFIED: EditStatus
EDIT_STATUS_APPLIED: EditStatus
EDIT_STATUS_OUT_OF_RANGE: EditStatus
EDIT_STATUS_OVERLAP: EditStatus
EDIT_STATUS_MISMATCH: EditStatus

class ToolCall(_message.Message):
    __slots__ = ("id", "name", "arguments")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content", "finish_reason", "status")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASONING_CONTENT_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    role: Role
    content: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    tool_call_id: str
    name: str
    reasoning_content: str
    finish_reason: str
    status: ResultStatus
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., content: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., tool_call_id: _Optional[str] = ..., name: _Optional[str] = ..., reasoning_content: _Optional[str] = ..., finish_reason: _Optional[str] = ..., status: _Optional[_Union[ResultStatus, str]] = ...) -> None: ...

class FileTools(_message.Message):
    __slots__ = ("reads", "writes", "edits", "by_shape")
    READS_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    EDITS_FIELD_NUMBER: _ClassVar[int]
    BY_SHAPE_FIELD_NUMBER: _ClassVar[int]
    reads: _containers.RepeatedScalarFieldContainer[str]
    writes: _containers.RepeatedScalarFieldContainer[str]
    edits: _containers.RepeatedScalarFieldContainer[str]
    by_shape: bool
    def __init__(self, reads: _Optional[_Iterable[str]] = ..., writes: _Optional[_Iterable[str]] = ..., edits: _Optional[_Iterable[str]] = ..., by_shape: _Optional[bool] = ...) -> None: ...

class Policy(_message.Message):
    __slots__ = ("window", "reserve", "low_water", "protect_tail_turns", "keep_latest_failure", "shrink_min_chars", "shrink_keep_chars", "file_tools", "path_root")
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    RESERVE_FIELD_NUMBER: _ClassVar[int]
    LOW_WATER_FIELD_NUMBER: _ClassVar[int]
    PROTECT_TAIL_TURNS_FIELD_NUMBER: _ClassVar[int]
    KEEP_LATEST_FAILURE_FIELD_NUMBER: _ClassVar[int]
    SHRINK_MIN_CHARS_FIELD_NUMBER: _ClassVar[int]
    SHRINK_KEEP_CHARS_FIELD_NUMBER: _ClassVar[int]
    FILE_TOOLS_FIELD_NUMBER: _ClassVar[int]
    PATH_ROOT_FIELD_NUMBER: _ClassVar[int]
    window: int
    reserve: int
    low_water: float
    protect_tail_turns: int
    keep_latest_failure: bool
    shrink_min_chars: int
    shrink_keep_chars: int
    file_tools: FileTools
    path_root: str
    def __init__(self, window: _Optional[int] = ..., reserve: _Optional[int] = ..., low_water: _Optional[float] = ..., protect_tail_turns: _Optional[int] = ..., keep_latest_failure: _Optional[bool] = ..., shrink_min_chars: _Optional[int] = ..., shrink_keep_chars: _Optional[int] = ..., file_tools: _Optional[_Union[FileTools, _Mapping]] = ..., path_root: _Optional[str] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ("name", "tokenizer", "policy", "tools_json", "message_count", "etag", "create_time", "expire_time", "ttl")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    name: str
    tokenizer: str
    policy: Policy
    tools_json: str
    message_count: int
    etag: str
    create_time: _timestamp_pb2.Timestamp
    expire_time: _timestamp_pb2.Timestamp
    ttl: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., tokenizer: _Optional[str] = ..., policy: _Optional[_Union[Policy, _Mapping]] = ..., tools_json: _Optional[str] = ..., message_count: _Optional[int] = ..., etag: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ("session_id", "tokenizer", "policy", "tools_json", "ttl")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    tokenizer: str
    policy: Policy
    tools_json: str
    ttl: _duration_pb2.Duration
    def __init__(self, session_id: _Optional[str] = ..., tokenizer: _Optional[str] = ..., policy: _Optional[_Union[Policy, _Mapping]] = ..., tools_json: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CreateSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions", "next_page_token")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[Session]
    next_page_token: str
    def __init__(self, sessions: _Optional[_Iterable[_Union[Session, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteSessionRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteSessionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AppendMessagesRequest(_message.Message):
    __slots__ = ("session", "messages", "request_id", "etag")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    session: str
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    request_id: str
    etag: str
    def __init__(self, session: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., request_id: _Optional[str] = ..., etag: _Optional[str] = ...) -> None: ...

class ToolCallVerdict(_message.Message):
    __slots__ = ("id", "name", "status", "detail", "runnable", "file_operation", "path", "problems", "repeat_of_index", "repeat_error")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    RUNNABLE_FIELD_NUMBER: _ClassVar[int]
    FILE_OPERATION_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    REPEAT_OF_INDEX_FIELD_NUMBER: _ClassVar[int]
    REPEAT_ERROR_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    status: ArgumentStatus
    detail: str
    runnable: bool
    file_operation: FileOperation
    path: str
    problems: _containers.RepeatedCompositeFieldContainer[Problem]
    repeat_of_index: int
    repeat_error: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., status: _Optional[_Union[ArgumentStatus, str]] = ..., detail: _Optional[str] = ..., runnable: _Optional[bool] = ..., file_operation: _Optional[_Union[FileOperation, str]] = ..., path: _Optional[str] = ..., problems: _Optional[_Iterable[_Union[Problem, _Mapping]]] = ..., repeat_of_index: _Optional[int] = ..., repeat_error: _Optional[str] = ...) -> None: ...

class AppendedMessage(_message.Message):
    __slots__ = ("index", "tokens", "tool_calls", "result_status")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    RESULT_STATUS_FIELD_NUMBER: _ClassVar[int]
    index: int
    tokens: int
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCallVerdict]
    result_status: ResultStatus
    def __init__(self, index: _Optional[int] = ..., tokens: _Optional[int] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCallVerdict, _Mapping]]] = ..., result_status: _Optional[_Union[ResultStatus, str]] = ...) -> None: ...

class AppendMessagesResponse(_message.Message):
    __slots__ = ("messages", "etag", "message_count", "replayed", "notes")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[AppendedMessage]
    etag: str
    message_count: int
    replayed: bool
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, messages: _Optional[_Iterable[_Union[AppendedMessage, _Mapping]]] = ..., etag: _Optional[str] = ..., message_count: _Optional[int] = ..., replayed: _Optional[bool] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...

class PromptOverrides(_message.Message):
    __slots__ = ("window", "reserve", "low_water", "protect_tail_turns")
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    RESERVE_FIELD_NUMBER: _ClassVar[int]
    LOW_WATER_FIELD_NUMBER: _ClassVar[int]
    PROTECT_TAIL_TURNS_FIELD_NUMBER: _ClassVar[int]
    window: int
    reserve: int
    low_water: float
    protect_tail_turns: int
    def __init__(self, window: _Optional[int] = ..., reserve: _Optional[int] = ..., low_water: _Optional[float] = ..., protect_tail_turns: _Optional[int] = ...) -> None: ...

class BuildPromptRequest(_message.Message):
    __slots__ = ("session", "overrides", "view", "messages", "request_id", "known_prompt", "accept_body_delta")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    OVERRIDES_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    KNOWN_PROMPT_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_BODY_DELTA_FIELD_NUMBER: _ClassVar[int]
    session: str
    overrides: PromptOverrides
    view: PromptView
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    request_id: str
    known_prompt: str
    accept_body_delta: bool
    def __init__(self, session: _Optional[str] = ..., overrides: _Optional[_Union[PromptOverrides, _Mapping]] = ..., view: _Optional[_Union[PromptView, str]] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., request_id: _Optional[str] = ..., known_prompt: _Optional[str] = ..., accept_body_delta: _Optional[bool] = ...) -> None: ...

class CompactionAction(_message.Message):
    __slots__ = ("index", "action", "detail", "handle", "tokens_saved")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_SAVED_FIELD_NUMBER: _ClassVar[int]
    index: int
    action: str
    detail: str
    handle: str
    tokens_saved: int
    def __init__(self, index: _Optional[int] = ..., action: _Optional[str] = ..., detail: _Optional[str] = ..., handle: _Optional[str] = ..., tokens_saved: _Optional[int] = ...) -> None: ...

class StepReport(_message.Message):
    __slots__ = ("step", "tokens_before", "tokens_after", "actions")
    STEP_FIELD_NUMBER: _ClassVar[int]
    TOKENS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_AFTER_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    step: str
    tokens_before: int
    tokens_after: int
    actions: _containers.RepeatedCompositeFieldContainer[CompactionAction]
    def __init__(self, step: _Optional[str] = ..., tokens_before: _Optional[int] = ..., tokens_after: _Optional[int] = ..., actions: _Optional[_Iterable[_Union[CompactionAction, _Mapping]]] = ...) -> None: ...

class BuildReport(_message.Message):
    __slots__ = ("tokens_before", "tokens_after", "fits", "compacted", "steps", "handles", "notes", "cache_break_at", "cache_break_tokens", "reread_tokens")
    TOKENS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_AFTER_FIELD_NUMBER: _ClassVar[int]
    FITS_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    HANDLES_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    CACHE_BREAK_AT_FIELD_NUMBER: _ClassVar[int]
    CACHE_BREAK_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REREAD_TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens_before: int
    tokens_after: int
    fits: bool
    compacted: bool
    steps: _containers.RepeatedCompositeFieldContainer[StepReport]
    handles: _containers.RepeatedScalarFieldContainer[str]
    notes: _containers.RepeatedScalarFieldContainer[str]
    cache_break_at: int
    cache_break_tokens: int
    reread_tokens: int
    def __init__(self, tokens_before: _Optional[int] = ..., tokens_after: _Optional[int] = ..., fits: _Optional[bool] = ..., compacted: _Optional[bool] = ..., steps: _Optional[_Iterable[_Union[StepReport, _Mapping]]] = ..., handles: _Optional[_Iterable[str]] = ..., notes: _Optional[_Iterable[str]] = ..., cache_break_at: _Optional[int] = ..., cache_break_tokens: _Optional[int] = ..., reread_tokens: _Optional[int] = ...) -> None: ...

class BuildPromptResponse(_message.Message):
    __slots__ = ("messages", "body_json", "tokens", "budget", "extends_previous", "prefix_changed_at", "report", "etag", "tokenizer", "appended", "prompt_id", "kept_messages", "kept_body_messages")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    BODY_JSON_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    EXTENDS_PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CHANGED_AT_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    APPENDED_FIELD_NUMBER: _ClassVar[int]
    PROMPT_ID_FIELD_NUMBER: _ClassVar[int]
    KEPT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    KEPT_BODY_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    body_json: str
    tokens: int
    budget: int
    extends_previous: bool
    prefix_changed_at: int
    report: BuildReport
    etag: str
    tokenizer: str
    appended: AppendMessagesResponse
    prompt_id: str
    kept_messages: int
    kept_body_messages: int
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., body_json: _Optional[str] = ..., tokens: _Optional[int] = ..., budget: _Optional[int] = ..., extends_previous: _Optional[bool] = ..., prefix_changed_at: _Optional[int] = ..., report: _Optional[_Union[BuildReport, _Mapping]] = ..., etag: _Optional[str] = ..., tokenizer: _Optional[str] = ..., appended: _Optional[_Union[AppendMessagesResponse, _Mapping]] = ..., prompt_id: _Optional[str] = ..., kept_messages: _Optional[int] = ..., kept_body_messages: _Optional[int] = ...) -> None: ...

class CountTokensRequest(_message.Message):
    __slots__ = ("tokenizer", "messages", "text", "tools_json")
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    tokenizer: str
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    text: str
    tools_json: str
    def __init__(self, tokenizer: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., text: _Optional[str] = ..., tools_json: _Optional[str] = ...) -> None: ...

class CountTokensResponse(_message.Message):
    __slots__ = ("tokens", "message_tokens", "tokenizer", "notes")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    tokens: int
    message_tokens: _containers.RepeatedScalarFieldContainer[int]
    tokenizer: str
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tokens: _Optional[int] = ..., message_tokens: _Optional[_Iterable[int]] = ..., tokenizer: _Optional[str] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...

class ListTokenizersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TokenizerProfile(_message.Message):
    __slots__ = ("name", "spec", "is_default", "description")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    spec: str
    is_default: bool
    description: str
    def __init__(self, name: _Optional[str] = ..., spec: _Optional[str] = ..., is_default: _Optional[bool] = ..., description: _Optional[str] = ...) -> None: ...

class ListTokenizersResponse(_message.Message):
    __slots__ = ("tokenizers",)
    TOKENIZERS_FIELD_NUMBER: _ClassVar[int]
    tokenizers: _containers.RepeatedCompositeFieldContainer[TokenizerProfile]
    def __init__(self, tokenizers: _Optional[_Iterable[_Union[TokenizerProfile, _Mapping]]] = ...) -> None: ...

class GetPayloadRequest(_message.Message):
    __slots__ = ("session", "handle")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    session: str
    handle: str
    def __init__(self, session: _Optional[str] = ..., handle: _Optional[str] = ...) -> None: ...

class GetPayloadResponse(_message.Message):
    __slots__ = ("handle", "content")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    handle: str
    content: str
    def __init__(self, handle: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class ValidateToolCallRequest(_message.Message):
    __slots__ = ("session", "tool_call", "tools_json", "finish_reason")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    session: str
    tool_call: ToolCall
    tools_json: str
    finish_reason: str
    def __init__(self, session: _Optional[str] = ..., tool_call: _Optional[_Union[ToolCall, _Mapping]] = ..., tools_json: _Optional[str] = ..., finish_reason: _Optional[str] = ...) -> None: ...

class Problem(_message.Message):
    __slots__ = ("code", "field", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    field: str
    message: str
    def __init__(self, code: _Optional[str] = ..., field: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ValidateToolCallResponse(_message.Message):
    __slots__ = ("status", "runnable", "arguments", "detail", "problems", "repeat_of_index", "repeat_error")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RUNNABLE_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    REPEAT_OF_INDEX_FIELD_NUMBER: _ClassVar[int]
    REPEAT_ERROR_FIELD_NUMBER: _ClassVar[int]
    status: ArgumentStatus
    runnable: bool
    arguments: str
    detail: str
    problems: _containers.RepeatedCompositeFieldContainer[Problem]
    repeat_of_index: int
    repeat_error: str
    def __init__(self, status: _Optional[_Union[ArgumentStatus, str]] = ..., runnable: _Optional[bool] = ..., arguments: _Optional[str] = ..., detail: _Optional[str] = ..., problems: _Optional[_Iterable[_Union[Problem, _Mapping]]] = ..., repeat_of_index: _Optional[int] = ..., repeat_error: _Optional[str] = ...) -> None: ...

class SuggestPathRequest(_message.Message):
    __slots__ = ("session", "content", "tool")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    session: str
    content: str
    tool: str
    def __init__(self, session: _Optional[str] = ..., content: _Optional[str] = ..., tool: _Optional[str] = ...) -> None: ...

class SuggestPathResponse(_message.Message):
    __slots__ = ("kind", "path", "confidence", "reason")
    KIND_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    kind: str
    path: str
    confidence: float
    reason: str
    def __init__(self, kind: _Optional[str] = ..., path: _Optional[str] = ..., confidence: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class LineEdit(_message.Message):
    __slots__ = ("start_line", "end_line", "body", "expected_old")
    START_LINE_FIELD_NUMBER: _ClassVar[int]
    END_LINE_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_OLD_FIELD_NUMBER: _ClassVar[int]
    start_line: int
    end_line: int
    body: str
    expected_old: str
    def __init__(self, start_line: _Optional[int] = ..., end_line: _Optional[int] = ..., body: _Optional[str] = ..., expected_old: _Optional[str] = ...) -> None: ...

class EditOutcome(_message.Message):
    __slots__ = ("index", "status", "message", "shift")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SHIFT_FIELD_NUMBER: _ClassVar[int]
    index: int
    status: EditStatus
    message: str
    shift: int
    def __init__(self, index: _Optional[int] = ..., status: _Optional[_Union[EditStatus, str]] = ..., message: _Optional[str] = ..., shift: _Optional[int] = ...) -> None: ...

class PlanEditsRequest(_message.Message):
    __slots__ = ("session", "snapshot", "snapshot_handle", "path", "edits")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    EDITS_FIELD_NUMBER: _ClassVar[int]
    session: str
    snapshot: str
    snapshot_handle: str
    path: str
    edits: _containers.RepeatedCompositeFieldContainer[LineEdit]
    def __init__(self, session: _Optional[str] = ..., snapshot: _Optional[str] = ..., snapshot_handle: _Optional[str] = ..., path: _Optional[str] = ..., edits: _Optional[_Iterable[_Union[LineEdit, _Mapping]]] = ...) -> None: ...

class PlanEditsResponse(_message.Message):
    __slots__ = ("text", "edits", "ok", "order")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    EDITS_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    text: str
    edits: _containers.RepeatedCompositeFieldContainer[EditOutcome]
    ok: bool
    order: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, text: _Optional[str] = ..., edits: _Optional[_Iterable[_Union[EditOutcome, _Mapping]]] = ..., ok: _Optional[bool] = ..., order: _Optional[_Iterable[int]] = ...) -> None: ...

class ListSessionEventsRequest(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: str
    def __init__(self, session: _Optional[str] = ...) -> None: ...

class SessionEvent(_message.Message):
    __slots__ = ("kind", "event_json")
    KIND_FIELD_NUMBER: _ClassVar[int]
    EVENT_JSON_FIELD_NUMBER: _ClassVar[int]
    kind: str
    event_json: str
    def __init__(self, kind: _Optional[str] = ..., event_json: _Optional[str] = ...) -> None: ...

class ListSessionEventsResponse(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[SessionEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[SessionEvent, _Mapping]]] = ...) -> None: ...

class ProfileSessionRequest(_message.Message):
    __slots__ = ("session", "tokenizers", "window", "top")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    TOKENIZERS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    session: str
    tokenizers: _containers.RepeatedScalarFieldContainer[str]
    window: int
    top: int
    def __init__(self, session: _Optional[str] = ..., tokenizers: _Optional[_Iterable[str]] = ..., window: _Optional[int] = ..., top: _Optional[int] = ...) -> None: ...

class TokenizerReport(_message.Message):
    __slots__ = ("tokenizer", "tokens", "profile_json")
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROFILE_JSON_FIELD_NUMBER: _ClassVar[int]
    tokenizer: str
    tokens: int
    profile_json: str
    def __init__(self, tokenizer: _Optional[str] = ..., tokens: _Optional[int] = ..., profile_json: _Optional[str] = ...) -> None: ...

class ProfileSessionResponse(_message.Message):
    __slots__ = ("reports",)
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    reports: _containers.RepeatedCompositeFieldContainer[TokenizerReport]
    def __init__(self, reports: _Optional[_Iterable[_Union[TokenizerReport, _Mapping]]] = ...) -> None: ...
