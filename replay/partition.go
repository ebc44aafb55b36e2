package replay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/feedco/feed/events"
)

// PartitionKey is a Hive-style partition of a directory output
// (--partition-by): each event goes to DIR/day=2026-12-06/type=post.created.v1/...
type PartitionKey string

// The partition keys, in the order the directories nest.
const (
	// ByDay is the event's recordedAt day in UTC (day=2026-12-06).
	ByDay PartitionKey = "day"
	// ByType is the event's type (type=post.created.v1).
	ByType PartitionKey = "type"
)

// ParsePartitionBy reads a --partition-by value: day, type or both
// (comma-separated, nested in the order given).
func ParsePartitionBy(s string) ([]PartitionKey, error) {
	var out []PartitionKey
	for _, k := range strings.Split(s, ",") {
		k := PartitionKey(strings.TrimSpace(k))
		switch k {
		case ByDay, ByType:
		default:
			return nil, invalidf("--partition-by %q: want day, type or day,type", s)
		}
		for _, seen := range out {
			if seen == k {
				return nil, invalidf("--partition-by %q: %s twice", s, k)
			}
		}
		out = append(out, k)
	}
	return out, nil
}

// maxOpenParts bounds the partition files open at once (each Parquet one
// holds its rows until closed): past it the least recently written is
// closed, and a later event of its partition starts a new file there
// (part-00001, ...). A replay in position order writes day after day, so
// a day's files are closed once the replay moved on.
const maxOpenParts = 32

// partitions writes each event into the file of its partition under dir.
type partitions struct {
	dir     string
	by      []PartitionKey
	format  Format
	withLSN bool
	open    map[string]*part // by partition path
	next    map[string]int   // the next file number of a partition
	tick    int64
	count   atomic.Int64
}

type part struct {
	w    *Writer
	f    *os.File
	used int64
}

// NewPartitionedWriter returns a writer of format f into the directory
// dir (created when missing), one Hive-style subdirectory per partition
// value of by, e.g. dir/day=2026-12-06/type=post.created.v1/part-00000.parquet:
// DuckDB, Spark and pandas read the partition values back as columns
// (DuckDB: hive_partitioning). A partition's file is complete when the
// writer is closed (or, past maxOpenParts partitions, when its partition
// was the least recently written).
func NewPartitionedWriter(dir string, f Format, withLSN bool, by []PartitionKey) (*Writer, error) {
	if len(by) == 0 {
		return nil, invalidf("a partitioned output needs a partition key")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create output directory: %w", err)
	}
	return &Writer{format: f, withLSN: withLSN, parts: &partitions{dir: dir, by: by, format: f, withLSN: withLSN,
		open: map[string]*part{}, next: map[string]int{}}}, nil
}

// path is the partition directory of e, relative to the output's.
func (p *partitions) path(e *events.Envelope) string {
	segs := make([]string, len(p.by))
	for i, k := range p.by {
		switch k {
		case ByDay:
			segs[i] = "day=" + e.RecordedAt.UTC().Format(time.DateOnly)
		case ByType:
			segs[i] = "type=" + e.Type
		}
	}
	return filepath.Join(segs...)
}

func (p *partitions) write(e *events.Envelope) error {
	key := p.path(e)
	pt, ok := p.open[key]
	if !ok {
		if len(p.open) >= maxOpenParts {
			if err := p.closeLeastRecent(); err != nil {
				return err
			}
		}
		var err error
		if pt, err = p.create(key); err != nil {
			return err
		}
		p.open[key] = pt
	}
	p.tick++
	pt.used = p.tick
	if err := pt.w.Write(e); err != nil {
		return err
	}
	p.count.Add(1)
	return nil
}

// create opens the next file of a partition.
func (p *partitions) create(key string) (*part, error) {
	d := filepath.Join(p.dir, key)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, fmt.Errorf("create partition directory: %w", err)
	}
	n := p.next[key]
	p.next[key] = n + 1
	f, err := os.OpenFile(filepath.Join(d, fmt.Sprintf("part-%05d.%s", n, p.format)), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create partition file: %w", err)
	}
	return &part{w: NewWriter(f, p.format, p.withLSN), f: f}, nil
}

func (p *partitions) closeLeastRecent() error {
	var oldest string
	for k, pt := range p.open {
		if oldest == "" || pt.used < p.open[oldest].used {
			oldest = k
		}
	}
	pt := p.open[oldest]
	delete(p.open, oldest)
	return pt.close()
}

func (pt *part) close() error {
	err := pt.w.Close()
	if cerr := pt.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close partition file: %w", cerr)
	}
	return err
}

func (p *partitions) flush() error {
	for _, pt := range p.open {
		if err := pt.w.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func (p *partitions) close() error {
	var errs []error
	for k, pt := range p.open {
		errs = append(errs, pt.close())
		delete(p.open, k)
	}
	return errors.Join(errs...)
}
