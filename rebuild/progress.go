package rebuild

import (
	"io"

	"github.com/feedco/feed/internal/progress"
)

// Progress shows how a rebuild advances: the command line's one renderer
// (internal/progress), a bar on a terminal, lines otherwise. A nil
// *Progress shows nothing. Each phase's counts also go to the rebuild's
// status record (Progress.Recording).
type Progress = progress.Progress

// NewProgress writes to w (stderr): a bar when tty, lines otherwise.
func NewProgress(w io.Writer, tty bool) *Progress { return progress.New(w, tty) }
