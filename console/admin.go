package console

import (
	"fmt"
	"net/http"
	"sort"
)

// node is a JSON value laid out for the admin page: a scalar, a list or an object.
type node struct {
	Key      string
	Scalar   string
	IsScalar bool
	Items    []node
}

func toNode(key string, v any) node {
	switch x := v.(type) {
	case map[string]any:
		n := node{Key: key}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			n.Items = append(n.Items, toNode(k, x[k]))
		}
		return n
	case []any:
		n := node{Key: key}
		for i, e := range x {
			n.Items = append(n.Items, toNode(fmt.Sprint(i), e))
		}
		return n
	case nil:
		return node{Key: key, IsScalar: true}
	case float64:
		return node{Key: key, IsScalar: true, Scalar: formatFloat(x)}
	}
	return node{Key: key, IsScalar: true, Scalar: fmt.Sprint(v)}
}

func (c *Console) adminPage(w http.ResponseWriter, r *http.Request, se *session) {
	var v any
	p, err := c.getJSON(r, se, "/api/v1/admin/overview", &v)
	if err != nil || p.Status != http.StatusOK {
		if err == nil && p.Status == http.StatusForbidden {
			c.errorPage(w, r, se, http.StatusForbidden, "The operator overview needs the operator key.")
			return
		}
		c.failed(w, r, se, p, err)
		return
	}
	c.render(w, r, http.StatusOK, "admin", c.pageOf(se, "Operator overview", "admin", "", toNode("overview", v)))
}
