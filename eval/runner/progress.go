package runner

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress draws a bar with the outcomes so far: redrawn in place on a
// terminal, a line every 5% otherwise (logs, CI).
type progress struct {
	w        io.Writer
	tty      bool
	total    int
	n        int
	counts   map[string]int
	start    time.Time
	lastStep int
}

func newProgress(w io.Writer, tty bool, total int, done []Result) *progress {
	p := &progress{w: w, tty: tty, total: total, counts: map[string]int{}, start: time.Now()}
	for _, r := range done {
		p.n++
		p.counts[r.Outcome]++
	}
	if p.w != nil && p.n > 0 {
		fmt.Fprintf(p.w, "resuming: %d of %d questions already answered\n", p.n, p.total)
	}
	p.lastStep = p.step()
	return p
}

func (p *progress) step() int {
	if p.total == 0 {
		return 0
	}
	return p.n * 20 / p.total
}

func (p *progress) add(r Result) {
	p.n++
	p.counts[r.Outcome]++
	if p.w == nil {
		return
	}
	if p.tty {
		fmt.Fprint(p.w, "\r"+p.line())
		return
	}
	if s := p.step(); s != p.lastStep || p.n == p.total {
		p.lastStep = s
		fmt.Fprintln(p.w, p.line())
	}
}

func (p *progress) line() string {
	const width = 30
	fill := 0
	if p.total > 0 {
		fill = p.n * width / p.total
	}
	bar := strings.Repeat("=", fill) + strings.Repeat(" ", width-fill)
	return fmt.Sprintf("[%s] %d/%d  correct %d  subset %d  wrong %d  error %d  abstained %d  %s",
		bar, p.n, p.total, p.counts[Correct], p.counts[Subset], p.counts[Wrong], p.counts[Error], p.counts[Abstained],
		time.Since(p.start).Round(time.Second))
}

func (p *progress) finish() {
	if p.w != nil && p.tty {
		fmt.Fprintln(p.w)
	}
}
