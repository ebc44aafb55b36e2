// Package schema holds the published JSON Schemas (draft 2020-12) of the
// event log: one file per event type and version (<type>.json, the
// payload, e.g. post.created.v1.json) and envelope.json (the envelope
// every event travels in: a Kafka message's value, a line of `feed
// events` JSONL). They are generated from the Go types in package events
// and checked in; after adding or changing an event type (and listing it
// in events.Registered), regenerate them with
//
//	go generate ./events/schema
//
// The tests fail when a type has no schema, a schema differs from what
// the types generate, or an event the code writes does not validate.
// docs/events.md gives the compatibility rules.
package schema

//go:generate go test -run TestSchemasMatchTypes -update .

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// BaseURL is where the schemas are published; each one's $id is BaseURL
// followed by its file name.
const BaseURL = "https://github.com/feedco/feed/blob/main/events/schema/"

// EnvelopeFile is the envelope's schema file.
const EnvelopeFile = "envelope.json"

// ErrNoSchema is returned for an event type without a schema.
var ErrNoSchema = errors.New("no schema for event type")

//go:embed *.json
var files embed.FS

// Files is the schema files, by name.
func Files() fs.FS { return files }

// Types lists the event types that have a schema, sorted.
func Types() []string {
	names, _ := fs.Glob(files, "*.json")
	var out []string
	for _, n := range names {
		if n != EnvelopeFile {
			out = append(out, strings.TrimSuffix(n, ".json"))
		}
	}
	sort.Strings(out)
	return out
}

var compiled = sync.OnceValues(compileAll)

func compileAll() (map[string]*jsonschema.Schema, error) {
	names, err := fs.Glob(files, "*.json")
	if err != nil {
		return nil, fmt.Errorf("list schemas: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			return nil, fmt.Errorf("read schema %s: %w", n, err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("parse schema %s: %w", n, err)
		}
		if err := c.AddResource(BaseURL+n, doc); err != nil {
			return nil, fmt.Errorf("add schema %s: %w", n, err)
		}
	}
	out := make(map[string]*jsonschema.Schema, len(names))
	for _, n := range names {
		s, err := c.Compile(BaseURL + n)
		if err != nil {
			return nil, fmt.Errorf("compile schema %s: %w", n, err)
		}
		out[n] = s
	}
	return out, nil
}

// Validate checks an event's JSON payload against the schema of its type.
func Validate(typ string, payload []byte) error {
	return validate(typ+".json", payload)
}

// ValidateEnvelope checks an envelope's JSON (its payload is checked by
// Validate, against its type's schema).
func ValidateEnvelope(b []byte) error {
	return validate(EnvelopeFile, b)
}

func validate(file string, b []byte) error {
	all, err := compiled()
	if err != nil {
		return err
	}
	s, ok := all[file]
	if !ok {
		return fmt.Errorf("validate %s: %w", strings.TrimSuffix(file, ".json"), ErrNoSchema)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("validate against %s: %w", file, err)
	}
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("validate against %s: %w", file, err)
	}
	return nil
}
