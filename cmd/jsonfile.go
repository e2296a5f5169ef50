package cmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// jsonFileError says, in the user's terms rather than Go's, why path is
// not what (a "bank-sim history", a "bank-sim recipe") when err is the
// JSON decoder's complaint, and how to make one. It is nil
// when err is not about the file's JSON. check and scenario --recipe both
// use it, so that a bad file reads the same wherever it is given.
func jsonFileProblem(path, what, howTo string, err error) error {
	var syntax *json.SyntaxError
	var shape *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF), errors.As(err, &syntax) && syntax.Offset == 0:
		return fmt.Errorf("%s is not %s: it is empty; %s", path, what, howTo)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%s is not %s: its JSON is cut short; %s", path, what, howTo)
	case syntax != nil:
		return fmt.Errorf("%s is not %s: it is not JSON (at byte %d); %s", path, what, syntax.Offset, howTo)
	case errors.As(err, &shape) && shape.Field != "":
		return fmt.Errorf("%s is not %s: its JSON has another shape (member %q holds a %s); %s", path, what, shape.Field, shape.Value, howTo)
	case shape != nil:
		return fmt.Errorf("%s is not %s: its JSON has another shape; %s", path, what, howTo)
	}
	// encoding/json has no type for a member the document should not have
	// (Decoder.DisallowUnknownFields); its text is all there is.
	if _, member, ok := strings.Cut(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("%s is not %s: its JSON has a member %s that %s does not have; %s", path, what, member, what, howTo)
	}
	return nil
}
