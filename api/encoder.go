package api

import (
	"encoding/json"

	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/service"
)

// Result kinds stored with futures: protobuf results are converted to JSON on retrieve
// when a (pre-0.25) client does not accept protobuf.
const (
	kindForwardBackward = "forward_backward"
	kindSample          = "sample"
	kindJSON            = "json"

	ctJSON  = "application/json"
	ctProto = "application/x-protobuf"
)

// encoder implements service.ResultEncoder with the wire types.
type encoder struct{}

// ResultEncoder is the wire types' service.ResultEncoder, wired once into the service
// (service.Options.Encoder) by whoever builds both.
func ResultEncoder() service.ResultEncoder { return encoder{} }

func jsonResult(v any) (futures.Result, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return futures.Result{}, err
	}
	return futures.Result{ContentType: ctJSON, Kind: kindJSON, Body: b}, nil
}

func (encoder) CreateModel(modelID string) (futures.Result, error) {
	return jsonResult(wire.CreateModelResponse{ModelID: modelID, Type: "create_model"})
}

func (encoder) UnloadModel(modelID string) (futures.Result, error) {
	return jsonResult(wire.UnloadModelResponse{ModelID: modelID, Type: "unload_model"})
}

func (encoder) ForwardBackward(res engine.ForwardResult, lossFn string) (futures.Result, error) {
	b, err := wire.EncodeForwardBackwardOutputProto(forwardOutput(res), lossFn)
	if err != nil {
		return futures.Result{}, err
	}
	return futures.Result{ContentType: ctProto, Kind: kindForwardBackward, Body: b}, nil
}

func (encoder) OptimStep(metrics map[string]float64) (futures.Result, error) {
	if metrics == nil {
		metrics = map[string]float64{}
	}
	return jsonResult(wire.OptimStepResponse{Metrics: metrics})
}

func (encoder) SaveWeights(path string) (futures.Result, error) {
	return jsonResult(wire.SaveWeightsResponse{Path: path, Type: "save_weights"})
}

func (encoder) SaveWeightsForSampler(path, samplingSessionID string) (futures.Result, error) {
	r := wire.SaveWeightsForSamplerResponse{Type: "save_weights_for_sampler"}
	if path != "" {
		r.Path = &path
	}
	if samplingSessionID != "" {
		r.SamplingSessionID = &samplingSessionID
	}
	return jsonResult(r)
}

func (encoder) LoadWeights(path, modelID string) (futures.Result, error) {
	return jsonResult(wire.LoadWeightsResponse{Path: &path, ModelID: &modelID, Type: "load_weights"})
}

func (encoder) Sample(res engine.SampleResult) (futures.Result, error) {
	b, err := wire.EncodeSampleResponseProto(sampleResponse(res))
	if err != nil {
		return futures.Result{}, err
	}
	return futures.Result{ContentType: ctProto, Kind: kindSample, Body: b}, nil
}

func (encoder) SaveWeightsExternal(res service.ExternalResult) (futures.Result, error) {
	size := res.SizeBytes
	return jsonResult(wire.SaveWeightsExternalResponse{Path: res.Path, SizeBytes: &size, Type: "save_weights_external"})
}
