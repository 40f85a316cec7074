// Listing UCX's RDMA transports through UCT's component and memory-domain queries
// (ucx_devices.h).
#include "transport/ucx_devices.h"

#include <uct/api/uct.h>

#include <cstring>

namespace loom::transport {
namespace {

// The memory domains of UCX's verbs component ("ib") own its RC, UD and DC transports.
constexpr const char* kVerbsComponent = "ib";

// The network transports of one memory domain of `component`.
void addNetworkTransports(uct_component_h component, const char* mdName, std::vector<std::string>* out) {
  uct_md_config_t* config = nullptr;
  if (uct_md_config_read(component, nullptr, nullptr, &config) != UCS_OK) return;
  uct_md_h md = nullptr;
  const ucs_status_t opened = uct_md_open(component, mdName, config, &md);
  uct_config_release(config);
  if (opened != UCS_OK) return;
  uct_tl_resource_desc_t* resources = nullptr;
  unsigned count = 0;
  if (uct_md_query_tl_resources(md, &resources, &count) == UCS_OK) {
    for (unsigned i = 0; i < count; ++i) {
      if (resources[i].dev_type != UCT_DEVICE_TYPE_NET) continue;
      out->push_back(std::string(resources[i].tl_name) + "/" + resources[i].dev_name);
    }
    uct_release_tl_resource_list(resources);
  }
  uct_md_close(md);
}

}  // namespace

std::vector<std::string> ucxRdmaTransports() {
  std::vector<std::string> found;
  uct_component_h* components = nullptr;
  unsigned count = 0;
  if (uct_query_components(&components, &count) != UCS_OK) return found;
  for (unsigned c = 0; c < count; ++c) {
    uct_component_attr_t attr{};
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME | UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    if (uct_component_query(components[c], &attr) != UCS_OK) continue;
    if (std::strcmp(attr.name, kVerbsComponent) != 0 || attr.md_resource_count == 0) continue;
    std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = mds.data();
    if (uct_component_query(components[c], &attr) != UCS_OK) continue;
    for (const uct_md_resource_desc_t& md : mds) addNetworkTransports(components[c], md.md_name, &found);
  }
  uct_release_component_list(components);
  return found;
}

}  // namespace loom::transport
