// Command otelcol-test is a real OpenTelemetry Collector for rewind's
// component test of `rewind agent`: the Collector's own otlp receiver
// (gRPC and HTTP, profiles enabled with --feature-gates=service.profilesSupport),
// the debug exporter, and a "profilefile" exporter that appends every
// profiles batch it receives to a file as an OTLP ExportProfilesServiceRequest
// (a 4-byte little-endian length, then the protobuf bytes), so the test
// can read exactly what the Collector received. It is its own Go module so
// that rewind does not depend on the Collector.
package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/debugexporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exporterhelper/xexporterhelper"
	"go.opentelemetry.io/collector/exporter/xexporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

// fileConfig configures the profilefile exporter.
type fileConfig struct {
	Path string `mapstructure:"path"`
}

type fileExporter struct {
	mu   sync.Mutex
	path string
}

func (e *fileExporter) push(_ context.Context, pd pprofile.Profiles) error {
	b, err := pprofileotlp.NewExportRequestFromProfiles(pd).MarshalProto()
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	f, err := os.OpenFile(e.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(b)))
	_, err = f.Write(append(n[:], b...))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func fileFactory() exporter.Factory {
	return xexporter.NewFactory(component.MustNewType("profilefile"),
		func() component.Config { return &fileConfig{} },
		xexporter.WithProfiles(func(ctx context.Context, set exporter.Settings, cfg component.Config) (xexporter.Profiles, error) {
			e := &fileExporter{path: cfg.(*fileConfig).Path}
			if e.path == "" {
				return nil, fmt.Errorf("profilefile: path is required")
			}
			return xexporterhelper.NewProfiles(ctx, set, cfg, e.push,
				exporterhelper.WithCapabilities(consumer.Capabilities{MutatesData: false}))
		}, component.StabilityLevelDevelopment))
}

func components() (otelcol.Factories, error) {
	return otelcol.Factories{
		Telemetry: otelconftelemetry.NewFactory(),
		Receivers: map[component.Type]receiver.Factory{otlpreceiver.NewFactory().Type(): otlpreceiver.NewFactory()},
		Exporters: map[component.Type]exporter.Factory{
			debugexporter.NewFactory().Type(): debugexporter.NewFactory(),
			fileFactory().Type():              fileFactory(),
		},
	}, nil
}

func main() {
	set := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{Command: "otelcol-test", Description: "rewind's test Collector", Version: "test"},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{ResolverSettings: confmap.ResolverSettings{
			ProviderFactories: []confmap.ProviderFactory{fileprovider.NewFactory(), envprovider.NewFactory()},
			DefaultScheme:     "env",
		}},
	}
	if err := otelcol.NewCommand(set).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
