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
}

// CanMove reports whether cause may move a charge from status from to
// status to. Staying in a status is always allowed: it records an answer
// that changes nothing the state machine knows (a declined capture, a
// cardholder who came back without finishing).
func CanMove(from, to, cause string) bool {
	return from == to || moves[move{from, to, cause}]
}
