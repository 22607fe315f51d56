package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Cached attribute sets carry exactly the attributes asked for, and the same option is
// reused for the same combination.
func TestAttrsCachesBoundedSets(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	c, _ := mp.Meter("t").Int64Counter("c")
	c.Add(context.Background(), 1, Attrs(MAttrOperationType, "optim_step", MAttrStatus, "ready"))
	c.Add(context.Background(), 2, Attrs(MAttrOperationType, "optim_step", MAttrStatus, "ready"))
	c.Add(context.Background(), 5, Attrs(MAttrOperationType, "sample", MAttrStatus, "failed"))
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, p := range rm.ScopeMetrics[0].Metrics[0].Data.(metricdata.Sum[int64]).DataPoints {
		op, _ := p.Attributes.Value(MAttrOperationType)
		st, _ := p.Attributes.Value(MAttrStatus)
		if p.Attributes.Len() != 2 {
			t.Fatalf("attributes %v", p.Attributes.ToSlice())
		}
		got[op.AsString()+"/"+st.AsString()] = p.Value
	}
	if got["optim_step/ready"] != 3 || got["sample/failed"] != 5 || len(got) != 2 {
		t.Fatalf("points %v", got)
	}
}

// The correlation keys survive a process boundary in W3C baggage.
func TestKeysCrossABoundaryInBaggage(t *testing.T) {
	t.Parallel()
	ctx := WithKeys(context.Background(), Keys{SessionID: "sess_1", TrainingRunID: "run/with spaces;and=odd", OperationType: "forward_backward"})
	carrier := propagation.MapCarrier{}
	propagation.Baggage{}.Inject(KeysToBaggage(ctx), carrier)
	if carrier["baggage"] == "" {
		t.Fatal("no baggage header")
	}
	remote := KeysFromBaggage(propagation.Baggage{}.Extract(context.Background(), carrier))
	k := KeysFrom(remote)
	if k.SessionID != "sess_1" || k.TrainingRunID != "run/with spaces;and=odd" || k.OperationType != "forward_backward" {
		t.Fatalf("keys after the boundary: %+v", k)
	}
	if KeysFromBaggage(baggage.ContextWithoutBaggage(context.Background())) == nil {
		t.Fatal("nil context")
	}
}
