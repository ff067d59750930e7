package agent

// Destinations are where an agent sends its profiles, each empty when not
// used: the exporters a command line asks for.
type Destinations struct {
	// OTLP is an OpenTelemetry Collector's gRPC HOST:PORT, OTLPHTTP its
	// HTTP URL.
	OTLP, OTLPHTTP string
	// Pyroscope is the URL of a Pyroscope server (POST /ingest).
	Pyroscope string
	// Dir is a directory of rotated pprof files, keeping the newest Keep
	// of each type.
	Dir  string
	Keep int
	// Freq is the sampling frequency, which the pprof exporters record.
	Freq int
}

// Open makes the exporters of d, in the order of its fields, and returns
// what closes those that hold a connection. On an error, what was opened
// is closed.
func (d Destinations) Open() (_ []Exporter, closeAll func(), err error) {
	var closers []func() error
	closeOpened := func() {
		for _, c := range closers {
			c()
		}
	}
	defer func() {
		if err != nil {
			closeOpened()
		}
	}()
	var out []Exporter
	if d.OTLP != "" {
		e, err := NewGRPC(d.OTLP)
		if err != nil {
			return nil, nil, err
		}
		closers = append(closers, e.Close)
		out = append(out, e)
	}
	if d.OTLPHTTP != "" {
		e, err := NewHTTP(d.OTLPHTTP)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, e)
	}
	if d.Pyroscope != "" {
		e, err := NewPyroscope(d.Pyroscope, "", d.Freq)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, e)
	}
	if d.Dir != "" {
		e, err := NewDir(d.Dir, d.Keep, d.Freq)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, e)
	}
	return out, closeOpened, nil
}
