package queries

import (
	"github.com/feedco/feed/readmodel"
)

// pageSource turns a read page of an inbox or a timeline (readmodel.Page)
// into a source.
func pageSource(p readmodel.Page) source { return zsource(p.Reply, p.Limit, p.Floor) }

// setResultOf turns a queued set read into a setResult once its pipeline
// ran.
func setResultOf(r readmodel.SetRead) (setResult, error) {
	p, err := r.Result()
	if err != nil {
		return setResult{}, err
	}
	return setResult{src: pageSource(p), built: p.Built}, nil
}

// rangeSource turns a queued range read into a source once its pipeline
// ran.
func rangeSource(r readmodel.RangeRead) (source, error) {
	p, err := r.Result()
	if err != nil {
		return source{}, err
	}
	return pageSource(p), nil
}
