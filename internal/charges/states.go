package charges

// What moves a charge. A transition names its cause; the state machine
// (CanMove) says which causes may move a charge from one status to another.
const (
	// CauseProcess: the worker carried out the charge's authorization,
	// capture or void at the provider (the default).
	CauseProcess = ""
	// CauseIssuer: the issuer's answer to the cardholder's authentication.
	CauseIssuer = "issuer"
	// CauseTimeout: the cardholder did not answer within AUTHENTICATION_TIMEOUT.
	CauseTimeout = "timeout"
	// CauseVoid: a void the merchant requested.
	CauseVoid = "void"
	// CauseNotification: the provider's notification of how a capture or
	// void it received ended.
	CauseNotification = "notification"
)

type move struct{ from, to, cause string }

// moves are the only status changes of api/openapi.yaml's state machine
// that the worker makes (refunds move captured charges in the refunds
// package).
var moves = map[move]bool{
	{StatusCreated, StatusRequiresAction, CauseProcess}: true,
	{StatusCreated, StatusAuthorized, CauseProcess}:     true,
	{StatusCreated, StatusCaptured, CauseProcess}:       true,
	{StatusCreated, StatusFailed, CauseProcess}:         true,

	{StatusRequiresAction, StatusAuthorized, CauseIssuer}: true,
	{StatusRequiresAction, StatusCaptured, CauseIssuer}:   true,
	{StatusRequiresAction, StatusFailed, CauseIssuer}:     true,
	{StatusRequiresAction, StatusFailed, CauseTimeout}:    true,
	{StatusRequiresAction, StatusVoided, CauseVoid}:       true,

	{StatusAuthorized, StatusCaptured, CauseProcess}: true,
	{StatusAuthorized, StatusVoided, CauseProcess}:   true,
	{StatusAuthorized, StatusVoided, CauseVoid}:      true,

	// A provider that settles by notification: the call is received, the
	// notification settles it, and may come before the call's own answer.
	{StatusAuthorized, StatusCapturing, CauseProcess}:      true,
	{StatusAuthorized, StatusVoiding, CauseVoid}:           true,
	{StatusCapturing, StatusCaptured, CauseNotification}:   true,
	{StatusCapturing, StatusAuthorized, CauseNotification}: true,
	{StatusVoiding, StatusVoided, CauseNotification}:       true,
	{StatusVoiding, StatusAuthorized, CauseNotification}:   true,
	{StatusAuthorized, StatusCaptured, CauseNotification}:  true,
	{StatusAuthorized, StatusVoided, CauseNotification}:    true,
}

// CanMove reports whether cause may move a charge from status from to
// status to. Staying in a status is always allowed: it records an answer
// that changes nothing the state machine knows (a declined capture, a
// cardholder who came back without finishing).
func CanMove(from, to, cause string) bool {
	return from == to || moves[move{from, to, cause}]
}
